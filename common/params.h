/* common/params.h — the SPILL_* parameter table.
 *
 * One row per knob in common/params.def. The top level (runtime init, the shim's
 * constructor, tools) loads the table once from the environment into a struct
 * sp_params and hands it down; modules never call getenv(). A malformed value is
 * an error naming the variable, never a silent default.
 */
#ifndef SP_COMMON_PARAMS_H
#define SP_COMMON_PARAMS_H

#include "common/error.h"

#include <stdint.h>
#include <stdio.h>

enum sp_param_type { SP_PARAM_STR, SP_PARAM_SIZE, SP_PARAM_INT, SP_PARAM_BOOL, SP_PARAM_DOUBLE };

#define SP_PARAM_CTYPE_STR    const char *
#define SP_PARAM_CTYPE_SIZE   uint64_t
#define SP_PARAM_CTYPE_INT    long
#define SP_PARAM_CTYPE_BOOL   int
#define SP_PARAM_CTYPE_DOUBLE double

struct sp_params {
#define SP_PARAM(field, type, def, choices, doc) SP_PARAM_CTYPE_##type field;
#include "common/params.def"
#undef SP_PARAM
};

struct sp_param_desc {
	const char *env; /* "SPILL_DEVICE_MEM" */
	enum sp_param_type type;
	const char *def;
	const char *choices; /* "" or "a|b|c" */
	const char *doc;
	size_t offset; /* into struct sp_params */
};

/* The table, in params.def order. */
extern const struct sp_param_desc sp_param_table[];
extern const size_t sp_param_count;

/* Fills *out with every default. Cannot fail (defaults are checked by a test). */
void sp_params_defaults(struct sp_params *out);

/* Loads every SPILL_* variable through getenv_fn (NULL = getenv) on top of the
 * defaults. Returns 0, or -EINVAL with a message naming the variable and the bad
 * value; *out is untouched on failure. Unknown SPILL_* variables in environ are
 * reported as warnings (likely typos). String values point into the environment
 * (or the table's literals) and live as long as they do. */
int sp_params_load(struct sp_params *out, const char *(*getenv_fn)(const char *)) SP_MUST_CHECK;

/* Sets one parameter from text, by variable name ("SPILL_DEVICES") or field name
 * ("devices"). Returns 0, -ENOENT for an unknown name, -EINVAL for a bad value. */
int sp_params_set(struct sp_params *p, const char *name, const char *value) SP_MUST_CHECK;

/* Rewrites the message msg (a buffer of len bytes) so that it names flag, what
 * the user typed, instead of the variable var behind it: "SPILL_X='v'" becomes
 * "--x v" and any other whole-word "SPILL_X" becomes "--x". For the top level
 * (tools, the trainer), whose flags set the same rows as the variables. */
void sp_params_rename(char *msg, size_t len, const char *var, const char *flag);

/* Parses a size: decimal digits with an optional K, M, G or T suffix (powers of
 * 1024; "KB", "KiB" and a plain "B" are accepted too). Returns 0 or -EINVAL. */
int sp_parse_size(const char *s, uint64_t *out) SP_MUST_CHECK;

/* bytes rounded up to a size class: 2^bits steps per power of two (bits 2:
 * ..., 1024, 1280, 1536, 1792, 2048, 2560, ...; at most 25% more), above
 * min (smaller sizes and bits 0 are returned as they are). The vmm's device
 * pools allocate in these classes so that the holes a program leaves are
 * reused by objects of its few sizes; the taskgraph's simulator counts the
 * same footprint. */
uint64_t sp_size_class(uint64_t bytes, int bits, uint64_t min);

/* Formats bytes as "1.50 GiB" into buf (at least 16 bytes). Returns buf. */
char *sp_format_size(uint64_t bytes, char *buf, size_t len);

/* Applies the logging parameters (level, subsystems, file). Returns 0, or -errno
 * if the log file cannot be opened or the subsystem list is malformed. */
int sp_params_apply_logging(const struct sp_params *p) SP_MUST_CHECK;

/* Prints the table as Markdown (for the README) or the current values as text. */
void sp_params_print_markdown(FILE *f);
void sp_params_print_values(FILE *f, const struct sp_params *p);

#endif
