// A real AI-SDK client of Compozy's prompt stream: what a `useChat` app does under the hood.
//
//   node chat.mjs PROMPT_URL TOKEN MESSAGE
//
// Sends MESSAGE through the SDK's DefaultChatTransport (the body shaped by prepareSendMessagesRequest to
// exactly what `POST …/prompt` accepts, the token as a Bearer header), assembles the assistant message with
// readUIMessageStream, and prints one JSON object: {message, errors, chunks} (the assembled UI message, the
// stream's error chunks, and the type of every chunk in order).
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [api, token, text] = process.argv.slice(2);
if (!api || !token || text === undefined) {
  console.error("usage: node chat.mjs PROMPT_URL TOKEN MESSAGE");
  process.exit(2);
}

const transport = new DefaultChatTransport({
  api,
  prepareSendMessagesRequest: ({ messages, headers }) => ({
    headers: { ...headers, Authorization: `Bearer ${token}` },
    // Compozy keeps the conversation itself: only the new user message's text parts are sent.
    body: {
      messages: messages.slice(-1).map((m) => ({
        role: m.role,
        parts: m.parts.filter((p) => p.type === "text").map((p) => ({ type: "text", text: p.text })),
      })),
    },
  }),
});

const user = { id: "user-1", role: "user", parts: [{ type: "text", text }] };
const stream = await transport.sendMessages({
  chatId: "compozy-aisdk-test",
  messages: [user],
  trigger: "submit-message",
  messageId: undefined,
  abortSignal: undefined,
});

const [forMessage, forChunks] = stream.tee();
const chunks = [];
const counted = (async () => {
  const reader = forChunks.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    chunks.push(value.type);
  }
})();

const errors = [];
let message = null;
for await (const snapshot of readUIMessageStream({
  stream: forMessage,
  onError: (error) => errors.push(String(error?.message ?? error)),
})) {
  message = snapshot;
}
await counted;
process.stdout.write(JSON.stringify({ message, errors, chunks }) + "\n");
