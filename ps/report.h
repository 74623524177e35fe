/* ps/report.c's interface — what the parameter server tells its operator:
 * the progress line every [ps] progress_every steps, the "step t has waited
 * Ns for ..." line while a step is held up (every PS_WAIT_LOG_MS), and the
 * summary line of a finished run. Reads the server's state, writes only the
 * log and its own state (ps_report_t, opaque): the progress sums, the last
 * step's figures, the curvature watch and the live view ([ps] metrics,
 * ps/http.h), which it owns. Loop thread only. */
#ifndef KFAC_PS_REPORT_H
#define KFAC_PS_REPORT_H

#include <stddef.h>

#include "ps/server_int.h"

/* The report's state: no inverse age known yet, no live view. NULL when
 * out of memory. Freed (the live view's thread stopped) by ps_report_free,
 * which NULLs the pointer and accepts NULL. */
ps_report_t *ps_report_new(void);
void ps_report_free(ps_report_t **r_p);

/* Start the live view on bind ([ps] metrics, host:port) and publish the
 * state once. Returns 0, -EIO (the port cannot be bound: not the
 * configuration's fault) or -ENOMEM, with the reason in err. */
int ps_report_http_start(ps_server_t *s, const char *bind, char *err, size_t err_len);

/* A step was applied (after ps_round_state_advance): the first one starts
 * the curvature watch's clock. */
void ps_report_stepped(ps_server_t *s);

/* The server starts (or resumes) at now_ns: the first progress period
 * counts from there. */
void ps_report_start(ps_server_t *s, uint64_t now_ns);

/* A step's row (common/run/rundir.h): its loss, accuracy and inverse ages
 * into the progress sums and the last step's figures. */
void ps_report_step(ps_server_t *s, const ps_step_row_t *row);

/* Log the progress line and start the next period's sums. */
void ps_report_progress(ps_server_t *s);

/* When no step for PS_WAIT_LOG_MS (rate-limited to one line per that
 * interval): log what the current step waits for. */
void ps_report_wait(ps_server_t *s);

/* kind = kfac: note when inverses were last installed and statistics last
 * folded (counted from the first step), and warn once each when that is
 * longer ago than [ps] curvature_warn_s: K-FAC then runs on old curvature
 * (or none). Called on the timer. */
void ps_report_curvature(ps_server_t *s);

/* After a step (stats = async): warn once when 20 steps of this process
 * had no statistics and no kfac-statsd is connected. */
void ps_report_no_statsd(ps_server_t *s);

/* Publish the state to the metrics endpoint (no-op when [ps] metrics is
 * off): after each step and on the timer. */
void ps_report_publish(ps_server_t *s);

/* "done: ..." for the end of the run into buf (always NUL-terminated). */
void ps_report_summary(const ps_server_t *s, char *buf, size_t len);

#endif
