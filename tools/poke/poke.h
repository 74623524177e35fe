/* tools/poke/poke.h — kfac-poke's parts (tools/kfac-poke.c: options,
 * frames, main; tools/poke/member.c: replies and the hostile members;
 * tools/poke/fast.c: the fast worker of the benchmarks). */
#ifndef KFAC_TOOLS_POKE_H
#define KFAC_TOOLS_POKE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/rng.h"
#include "proto/msg.h"

typedef struct poke_cfg {
    char *endpoint;
    int count;
    uint64_t seed;
    int wait_ms;
    int replies;
    int interval_ms;
    char *kinds;
    int print;
    int oversize_bytes;
    int large_bytes;
    int member_id;
    char *member_kind;
    double bias;        /* --member_kind bias: each push is -bias x the parameters it was sent */
    int bias_examples;  /* ... claiming this many examples (the honest batch: an equal share of the mean) */
    char *host; /* the hostile member's Hello.host ("": this host's name) */
    char *client_secret_key, *client_public_key, *server_public_key; /* CURVE (docs/security.md) */
} poke_cfg_t;

typedef struct tally {
    uint64_t n_replies;
    uint64_t by_type[MSG_TYPE_COUNT];
    uint64_t by_error[MSG_ERR_COUNT];
    uint64_t n_undecodable;
} tally_t;

/* Encode m into a malloc'd buffer; exits on failure (a programming error). */
uint8_t *poke_encode(const msg_t *m, size_t *len);

/* Read the replies that arrive within timeout_ms into t (see member.c). */
void poke_collect(void *sock, int timeout_ms, const poke_cfg_t *c, tally_t *t);
void poke_sleep_ms(int ms);

/* The hostile member of --member_id / --member_kind (the header of
 * tools/kfac-poke.c). Returns the exit status. */
int poke_member(void *sock, const poke_cfg_t *c, rng_t *r);

/* The fast worker (--member_kind fast-worker; the header of
 * tools/poke/fast.c): joins as worker --member_id and answers each new
 * Params at once with a stored gradient until Shutdown, a signal or
 * --count pushes. Returns the exit status. */
int poke_fast_worker(void *sock, const poke_cfg_t *c, rng_t *r);

#endif
