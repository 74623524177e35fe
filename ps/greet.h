/* ps/greet.h — what kfac-ps answers a Hello, as decisions over plain
 * inputs (STYLE 8a): the protocol version, the message's validity, the
 * build, whether the run still goes on; the most connections a role may
 * hold; the data shard a new worker or stats worker gets. ps/hello.c does
 * the I/O (Refuse, Error, Shutdown, Welcome) and the table changes; the
 * other admission rules are ps/member.h's (a member id held by a live
 * connection: try again later; a silent one: take over) and ps/owner.h's
 * (an id stays with its CURVE key; members per key).
 *
 * Threads: the PS's loop thread (no state of its own). No I/O:
 * unit-tested in tests/ps/test_ps_greet.c.
 */
#ifndef KFAC_PS_GREET_H
#define KFAC_PS_GREET_H

#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"
#include "ps/peers.h"

/* The first answer to a Hello, before keys, ids and room. */
typedef enum {
    PS_GREET_GO = 0,          /* go on: key, member id and room, then Welcome */
    PS_GREET_REFUSE_VERSION,  /* another protocol version: Refuse (the client exits) */
    PS_GREET_INVALID,         /* the Hello fails msg_validate: Error INVALID */
    PS_GREET_REFUSE_BUILD,    /* a build of another release: Refuse */
    PS_GREET_RUN_OVER,        /* the run is over: Shutdown */
} ps_greet_t;

/* Decide on Hello m (decoded; limits: the model's message limits, borrowed)
 * while the run is running or not. The checks go in this order: protocol
 * version, validity, build, run. For every answer but PS_GREET_GO and
 * PS_GREET_RUN_OVER, err gets the text to send and log. */
ps_greet_t ps_greet_hello(const msg_t *m, const msg_limits_t *limits, int running, char *err, size_t err_len);

/* Is the client's build id compatible with KFAC_BUILD_ID (the same first
 * two words: "kfac" and the release)? 1 yes; 0 no, with the reason in why
 * (the client's id escaped for the log). */
int ps_greet_build_compatible(const char *client_build, char *why, size_t why_len);

/* The most connections of role held at once, so that a flood of one role
 * cannot take the slots of another: workers and stats workers 2 x their
 * configured number, at least that number + 16; inverse daemons half of
 * max_peers; others 16. */
int ps_greet_role_cap(msg_role_t role, int workers, int statsd, int max_peers);

/* The data shard of new client p (its role, asked_id and id set) among
 * n_ranks = [cluster] workers (gradient workers) or statsd (at least 1;
 * stats workers); other roles have none (n_ranks 0, rank 0). Its own
 * --id when that shard is free, else the lowest free one; when every
 * shard is taken, shared round-robin by its id (shared = 1). */
typedef struct ps_greet_rank {
    int rank, n_ranks;
    int shared; /* more clients of the role than shards: it shares one */
} ps_greet_rank_t;
ps_greet_rank_t ps_greet_rank(const ps_peers_t *peers, const ps_peer_t *p, int workers, int statsd);

#endif
