// Pages without their own script still show the daemon status in the header.
import { startDaemonStatus } from "./common.js";

startDaemonStatus({ doctor: false }); // a not-found page: the status line alone
