// Pages without their own script still show the daemon status in the header.
import { pageData, startDaemonStatus } from "./common.js";

startDaemonStatus(pageData().features || {});
