/* common/base/config_int.h — internal to the config module (config.c,
 * config_text.c, config_help.c); nothing outside common/base/config*.c
 * includes it. The small text helpers the parser, the error messages and
 * --help share: type names, bounds, "did you mean" distances, quoting. */
#ifndef KFAC_BASE_CONFIG_INT_H
#define KFAC_BASE_CONFIG_INT_H

#include <stddef.h>

#include "common/base/config.h"

#define CONFIG_SHOW_MAX 60 /* characters of a bad value quoted in messages */

const char *config_txt_type_name(const config_option_t *o);
void config_txt_fmt_double(double v, char *buf, size_t len);
void *config_txt_field(void *cfg, const config_option_t *o);
const void *config_txt_cfield(const void *cfg, const config_option_t *o);
int config_txt_has_min(const config_option_t *o);
int config_txt_has_max(const config_option_t *o);
void config_txt_bounds_text(const config_option_t *o, char *buf, size_t len);
void config_txt_expected(const config_option_t *o, char *buf, size_t len);
int config_txt_norm_char(int c);
size_t config_txt_distance(const char *a, const char *b);
int config_txt_close(const char *typed, size_t d);
int config_txt_name_eq(const char *a, const char *b, int loose);
int config_txt_in_list(const char *const *list, const char *name);
int config_txt_section_owned(const config_spec_t *spec, const char *name);
const char *const *config_txt_known(const config_spec_t *spec);
void config_txt_show(const char *v, char *buf, size_t len);

#endif
