/* A small streaming JSON writer for the exporters that build nested documents (check, diff): it
 * places the commas, so a writer says only what goes where. Private to the exporters. */
#ifndef MT_EXPORT_JSON_WRITER_H
#define MT_EXPORT_JSON_WRITER_H

#include <stdint.h>

#include "memtrace/export.h"

#define MT_JSON_MAX_DEPTH 32

typedef struct mt_json {
    mt_out *o;
    int depth;
    uint8_t started[MT_JSON_MAX_DEPTH]; /* the container at this depth has a member already */
} mt_json;

/* key: the member's name inside an object, NULL inside an array or at the top. */
void mt_json_object(mt_json *j, const char *key);
void mt_json_array(mt_json *j, const char *key);
void mt_json_end(mt_json *j, char close); /* '}' or ']' */
void mt_json_u64(mt_json *j, const char *key, uint64_t v);
void mt_json_i64(mt_json *j, const char *key, int64_t v);
void mt_json_double(mt_json *j, const char *key, double v); /* null when not finite */
void mt_json_str(mt_json *j, const char *key, const char *s);
void mt_json_bool(mt_json *j, const char *key, int v);
void mt_json_null(mt_json *j, const char *key);
#endif
