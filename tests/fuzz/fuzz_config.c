/* tests/fuzz/fuzz_config.c — libFuzzer harness of the run-file parser:
 * the input, as INI text, through config_parse_text() with the option table
 * of every role (kfac-ps, worker, statsd, invertd, kfac-train), then
 * runcfg_validate() and the dump of what was accepted. Any crash, leak or
 * undefined behaviour is a bug; rejections are expected. Seeds: the example
 * and experiment run files. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/config.h"
#include "common/run/runcfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[1024];
    for (int r = 0; r < RUNCFG_ROLE_COUNT; r++) {
        const config_spec_t *spec = runcfg_spec((runcfg_role_t)r);
        if (!spec) continue;
        runcfg_t c;
        runcfg_init(&c);
        if (config_defaults(spec, &c, err, sizeof err) == 0 &&
            config_parse_text(spec, &c, text, "fuzz.ini", err, sizeof err) == 0 &&
            runcfg_validate(&c, err, sizeof err) == 0) {
            char *dump = config_to_text(spec, &c, NULL, CONFIG_TEXT_COMMENTS);
            free(dump);
        }
        config_release(spec, &c);
    }
    free(text);
    return 0;
}
