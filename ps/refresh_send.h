/* ps/refresh_send.h — Params for kfac-statsd under [kfac] refresh = adaptive.
 * (split out of ps/server_int.h: each unit of kfac-ps has its own header,
 * and a file includes those whose functions it calls). */
#ifndef KFAC_PS_REFRESH_SEND_H
#define KFAC_PS_REFRESH_SEND_H

#include "ps/server_int.h"

/* Params for a kfac-statsd under refresh = adaptive: the current version
 * with stats_layers = the layers wanted now; while none is, the request is
 * held (answered at the first step that makes a layer due). Returns 0 or
 * -errno. */
int ps_refresh_send_statsd(ps_server_t *s, ps_peer_t *p);

#endif
