/* common/base/version.h — the version of this build, one string for every
 * program. Hello/Welcome carry KFAC_BUILD_ID: a client whose build id differs
 * from the PS's is refused (the two must compute the same step), and
 * --version prints it. Bump KFAC_VERSION with every release; the protocol
 * number is proto/msg.h's KFAC_PROTOCOL_VERSION. */
#ifndef KFAC_BASE_VERSION_H
#define KFAC_BASE_VERSION_H

#define KFAC_VERSION "0.1"
#define KFAC_BUILD_ID "kfac " KFAC_VERSION " (protocol 1)"

#endif
