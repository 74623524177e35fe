/* ps/hello.h — a Hello: admission, member ids and identities, the join lines.
 * (split out of ps/server_int.h: each unit of kfac-ps has its own header,
 * and a file includes those whose functions it calls). */
#ifndef KFAC_PS_HELLO_H
#define KFAC_PS_HELLO_H

#include "ps/server_int.h"

/* ps/hello.c: its state (client ids, the member ids bound to CURVE keys,
 * its log lines' limits): NULL when out of memory; ps_hello_free NULLs the
 * pointer and accepts NULL. */
ps_hello_t *ps_hello_new(void);
void ps_hello_free(ps_hello_t **h_p);
/* ps/hello.c: a key removed from the allowlist no longer holds member ids. */
void ps_hello_forget_key(ps_server_t *s, const char *key);
/* ps/hello.c: the member ids bound to CURVE keys (borrowed; a checkpoint
 * saves and restores them, ps/persist.c). */
ps_owners_t *ps_hello_owners(ps_server_t *s);
/* The member identities (ps/ident.h), which a checkpoint saves and restores. */
ps_idents_t *ps_hello_idents(ps_server_t *s);
/* ps/hello.c: drop the bindings of keys not listed for their role (all of
 * them without CURVE): after a resume, once the allowlists are read, and
 * after each reload. Returns how many were dropped (logged). */
int ps_hello_keep_listed(ps_server_t *s);
/* ps/hello.c: answer a Hello from route (p: its record, NULL when new):
 * Refuse, an answer to try again later, or Welcome with the client's slot. */
void ps_hello_handle(ps_server_t *s, const zloop_peer_t *route, ps_peer_t *p, const msg_t *m);

/* Whether a line saying that a client of role joined or left may be logged
 * now (PS_JOIN_LOG_BURST per PS_JOIN_LOG_WINDOW_MS per role); more as
 * ps_refusal_log_ok ("[N more like it not logged]" once some were held back). */
int ps_join_log_ok(ps_server_t *s, msg_role_t role, char *more, size_t more_len);

#endif
