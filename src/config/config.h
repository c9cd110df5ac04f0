/* Table-driven INI configuration over libinih.
 *
 * A program describes its keys in a kvp__conf_key_t table (section, name,
 * type, offset into its config struct, bounds, help). kvp__conf_load() reads
 * a file with libinih and sets each key; an unknown section or key, a bad
 * value or a value out of bounds is an error that names the file, the line
 * and the key. kvp__conf_set() applies one "section.key=value" override from
 * the command line with the same checks. */
#ifndef KVP_COMMON_CONFIG_H
#define KVP_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef enum kvp_conf_type_e {
  KVP_CONF_STR,      /* char[max] inside the struct; max is the capacity */
  KVP_CONF_INT,      /* int64_t in [min, max] */
  KVP_CONF_BOOL,     /* int: true/false, yes/no, on/off, 1/0 */
  KVP_CONF_DOUBLE,   /* double */
  KVP_CONF_DURATION, /* int64_t milliseconds: "250ms", "5s", "2m", "1h", "7d", or ms */
  KVP_CONF_SIZE,     /* int64_t bytes: "512", "64KiB", "16MiB", "2GiB", "1TiB" */
  KVP_CONF_ENUM,     /* int: index into choices (NULL-terminated) */
} kvp_conf_type_t;

typedef struct kvp_conf_key_s {
  const char *section;
  const char *name;
  kvp_conf_type_t type;
  size_t offset;
  int64_t min, max;           /* bounds (INT, DURATION, SIZE); capacity for STR */
  const char *const *choices; /* ENUM only */
  const char *help;
  const char *alias_of; /* set: an old name of the key `alias_of` of the same
                         * section (same offset); accepted with a warning,
                         * never printed */
} kvp_conf_key_t;

/* Loads path into obj. Returns 0, KVP_EIO when the file cannot be read, or
 * KVP_ECONFIG; on error err holds "path:line: [section] key: cause". */
int kvp__conf_load(const char *path, const kvp_conf_key_t *keys, size_t nkeys, void *obj, char *err,
                   size_t errlen);

/* Entries of sections named "<prefix> <name>" (such as [volume g3-nvme0]),
 * which a fixed table cannot list: called once per key with the name after
 * the prefix and the key's line in the file, for checks made later to name
 * it. Returns 0, or KVP_ECONFIG with err set (without file or line). */
typedef int (*kvp__conf_dyn_fn)(void *ctx, const char *name, const char *key, const char *value,
                                int line, char *err, size_t errlen);

/* kvp__conf_load, with sections "<dyn_prefix> <name>" handed to dyn. */
int kvp__conf_load_dyn(const char *path, const kvp_conf_key_t *keys, size_t nkeys, void *obj,
                       const char *dyn_prefix, kvp__conf_dyn_fn dyn, void *dyn_ctx, char *err,
                       size_t errlen);

/* Applies "section.key=value" (from the command line). Returns 0 or
 * KVP_ECONFIG with err set. */
int kvp__conf_override(const char *assignment, const kvp_conf_key_t *keys, size_t nkeys, void *obj,
                       char *err, size_t errlen);

/* Sets one key from text. Returns 0 or KVP_ECONFIG with err naming the cause
 * (without file or line). */
int kvp__conf_set(const kvp_conf_key_t *keys, size_t nkeys, void *obj, const char *section,
                  const char *name, const char *value, char *err, size_t errlen);

/* Parsers shared with command-line handling. Return 0, KVP_ECONFIG, or
 * (duration, size) KVP_ETOOBIG for a well-formed value past int64. */
int kvp__parse_duration_ms(const char *s, int64_t *out);
int kvp__parse_size(const char *s, int64_t *out);
int kvp__parse_bool(const char *s, int *out);

#endif
