// The session page: wires its modules together and starts them, in this order.
//
//   session-record.js       the page data and the session record (refetch, poll)
//   session-composer.js     the composer, busy-input modes, the queue, the turn actions
//   session-permissions.js  the permission requests and the decisions on them
//   session-elicitations.js the agent's questions (elicitations), answered with a form from their schema
//   session-stream.js       the transcript: live stream, catch-up, older history
//   session-diagnostics.js  the diagnostics panel, health, recap, repair
//   session-agent.js        the agent's mode (and switcher), context meter and cost in the header
//   session-commands.js     the agent's slash commands, offered in the composer on `/`
//   session-changes.js      a worktree session's work: changes, checkpoints, rewind, fork, commit, merge
//   session-working.js      the running turn's line in the header: elapsed, its tool, or "no output for …"
//   session-head.js         the header, and what a new record means for the rest
//
// Imports run one way, from the head down to the record. The two calls that must run back up, a
// refetched record (to the header, or to the stream when the session is gone) and the open permission
// requests (to the transcript's cards), are registered here.
import { startDaemonStatus } from "./common.js";
import {
  addQueued, refreshQueue, renderQueue, setupActions, setupComposer, setupModes,
} from "./session-composer.js";
import { loadHealth, loadRecap, setupRepair, tickTimers } from "./session-diagnostics.js";
import { setupAgentFacts } from "./session-agent.js";
import { setupCommands } from "./session-commands.js";
import { setupWork, workOnRecord } from "./session-changes.js";
import { refreshElicitations } from "./session-elicitations.js";
import { renderHead } from "./session-head.js";
import { onOpenRequests, refreshPermissions } from "./session-permissions.js";
import { $, data, onRecord, pollSession, session } from "./session-record.js";
import { openStream, streamRemoved, updateOlder, view, watchOlder } from "./session-stream.js";
import { renderWorking } from "./session-working.js";

startDaemonStatus();

onRecord(() => {
  renderHead();
  workOnRecord();
}, streamRemoved);
onOpenRequests((open) => view.refreshPermissions(open));

function start() {
  updateOlder();
  for (const entry of data.queue || []) addQueued(entry);
  renderQueue();
  setupModes();
  renderHead();
  setupActions();
  setupComposer();
  setupCommands();
  setupAgentFacts();
  setupWork();

  // Stopped sessions too: the snapshot is their transcript, then the stream ends at once.
  if (session.state === "stopped") $("stream-indicator").hidden = true; // nothing live to show
  openStream();
  watchOlder();
  pollSession();
  setInterval(() => {
    tickTimers();
    renderWorking();
  }, 1_000);
  refreshPermissions();
  refreshElicitations();
  refreshQueue();
  loadHealth();
  loadRecap();
  $("recap-refresh").addEventListener("click", loadRecap);
  setupRepair();
}

start();
