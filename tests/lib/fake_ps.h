/* tests/lib/fake_ps.h — the socket of a fake kfac-ps for the client tests
 * (tests/net/test_client.c, tests/net/test_daemon.c): a ROUTER bound to a
 * free port on 127.0.0.1 that one thread of the test drives with whole
 * messages ([client id][encoded msg_t]). Check assertions fail the test. */
#ifndef KFAC_TESTS_FAKE_PS_H
#define KFAC_TESTS_FAKE_PS_H

#include <stddef.h>
#include <zmq.h>

#include "proto/msg.h"

/* A new ZeroMQ context (*ctx) and a ROUTER (*sock) bound to a port ZeroMQ
 * picks, linger 200 ms; its address in endpoint (endpoint_len bytes). Bind
 * here, then hand the socket to the thread that uses it (creating the
 * thread is the memory barrier ZeroMQ asks for when a socket changes
 * threads); that thread closes it, the test terminates the context. */
void fake_ps_open(void **ctx, void **sock, char *endpoint, size_t endpoint_len);

/* Send m (only read) to the client id: 1 when both frames left, else 0. */
int fake_ps_send(void *sock, zmq_msg_t *id, const msg_t *m);

/* Welcome the client id as kfac-ps does: model_text, the shared
 * configuration of a kfac-ps loaded from ps_argv (ps_argc entries, the
 * program name first; the load must succeed), assigned id 42, one rank.
 * 1 when it left, else 0. */
int fake_ps_send_welcome(void *sock, zmq_msg_t *id, const char *model_text, int ps_argc, char **ps_argv);

/* The next message from a client that is not a Heartbeat, within
 * timeout_ms, decoded into m (msg_clear it); *id becomes its sender (it is
 * left as it was when nothing comes). Returns 0, or -1 on timeout or an
 * undecodable message. */
int fake_ps_recv(void *sock, zmq_msg_t *id, msg_t *m, int timeout_ms);

#endif
