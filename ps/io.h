/* ps/io.h — the parameter server's outgoing messages and clocks, used by
 * the life cycle (server.c) and the round (round.c) alike, so that neither
 * of those calls the other for I/O: encode and send to one client, answer a
 * bad request with Error (counted, rate-limited log line), Refuse/Shutdown
 * texts. Threads: the loop thread only. */
#ifndef KFAC_PS_IO_H
#define KFAC_PS_IO_H

#include "proto/msg.h"
#include "ps/server_int.h"

/* Its state (the limits of its log lines): NULL when out of memory;
 * ps_io_free NULLs the pointer and accepts NULL. */
ps_io_t *ps_io_new(void);
void ps_io_free(ps_io_t **io_p);

/* Seconds since the server started. */
double ps_io_wall_s(const ps_server_t *s);

/* Encode m and send it to route. Returns 0 or a negative errno (a peer that
 * went away is logged at debug level only). */
int ps_io_send(ps_server_t *s, const zloop_peer_t *route, const msg_t *m);

/* Send a Refuse (type MSG_REFUSE) or Shutdown (MSG_SHUTDOWN) with text. */
void ps_io_send_text(ps_server_t *s, const zloop_peer_t *route, msg_type_t type, const char *text);

/* Answer a message with Error(code, text) and count it under type. p may be
 * NULL (unknown sender). The line logged is rate-limited, one line a
 * second per message type and error code, with the count held back. */
void ps_io_reject(ps_server_t *s, const zloop_peer_t *route, ps_peer_t *p, msg_type_t type, msg_error_code_t code,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* The same, logged under the caller's limiter rl: one line a second for
 * one cause (e.g. gradients with too many examples). */
void ps_io_reject_rl(ps_server_t *s, ratelimit_t *rl, const zloop_peer_t *route, ps_peer_t *p, msg_type_t type,
                     msg_error_code_t code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* Whether a refusal line of this cause may be logged now (one a second per
 * cause, rl the cause's limiter); more receives " [N more like it not
 * logged]" or "". */
int ps_refusal_log_ok(ratelimit_t *rl, char *more, size_t more_len);

/* The same with the limiter ps_io_reject uses for (type, code): for a
 * refusal answered otherwise than with Error (a Refuse). */
int ps_io_reject_log_ok(ps_server_t *s, msg_type_t type, msg_error_code_t code, char *more, size_t more_len);

/* Whether a line about what a client reports or asks (an Error it sends,
 * a job request while it holds a job) may be logged now: one a second for
 * all of them; *skipped receives how many were held back since the last. */
int ps_io_peer_log_ok(ps_server_t *s, uint64_t *skipped);

#endif
