/* common/net/zloop_int.h — what zloop.c shares with zloop_buf.c (the
 * shared send buffers); not for other modules. Loop thread only. */
#ifndef KFAC_NET_ZLOOP_INT_H
#define KFAC_NET_ZLOOP_INT_H

#include <zmq.h>

#include "common/net/zloop.h"

/* Send payload to peer (ROUTER: with its routing id frame); payload is
 * consumed (closed) in every case. Returns as zloop_send. */
int zloop_send_zmsg(zloop_socket_t *s, const zloop_peer_t *peer, zmq_msg_t *payload);

#endif
