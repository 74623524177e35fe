/* ps/report.c's interface — what the parameter server tells its operator:
 * the progress line every [ps] progress_every steps, the "step t has waited
 * Ns for ..." line while a step is held up (every PS_WAIT_LOG_MS), and the
 * summary line of a finished run. Reads the server's state, writes only the
 * log (and the progress sums it resets). Loop thread only. */
#ifndef KFAC_PS_REPORT_H
#define KFAC_PS_REPORT_H

#include <stddef.h>

#include "ps/server_int.h"

/* Log the progress line and start the next period's sums. */
void ps_report_progress(ps_server_t *s);

/* When no step for PS_WAIT_LOG_MS (rate-limited to one line per that
 * interval): log what the current step waits for. */
void ps_report_wait(ps_server_t *s);

/* "done: ..." for the end of the run into buf (always NUL-terminated). */
void ps_report_summary(const ps_server_t *s, char *buf, size_t len);

#endif
