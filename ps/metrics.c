/* ps/metrics.c — see metrics.h. */
#include "ps/metrics.h"

#include <stdio.h>

const char *ps_format_duration(double s, char *buf, size_t len) {
    if (!(s >= 0.0)) s = 0.0;
    if (s < 10.0) snprintf(buf, len, "%.1fs", s);
    else if (s < 3600.0) {
        long t = (long)(s + 0.5);
        if (t < 60) snprintf(buf, len, "%lds", t);
        else snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    } else {
        long m = (long)(s / 60.0 + 0.5);
        snprintf(buf, len, "%ldh%02ldm", m / 60, m % 60);
    }
    return buf;
}
