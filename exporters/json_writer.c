/* The exporters' streaming JSON writer (json_writer.h). */
#include <math.h>

#include "json_writer.h"

static void member(mt_json *j, const char *key)
{
    if (j->depth > 0 && j->depth < MT_JSON_MAX_DEPTH) {
        if (j->started[j->depth]) mt_out_write(j->o, ",", 1);
        j->started[j->depth] = 1;
    }
    if (key) {
        mt_out_json_string(j->o, key);
        mt_out_write(j->o, ":", 1);
    }
}

static void open_container(mt_json *j, const char *key, const char *open)
{
    member(j, key);
    mt_out_write(j->o, open, 1);
    j->depth++;
    if (j->depth < MT_JSON_MAX_DEPTH) j->started[j->depth] = 0;
}

void mt_json_object(mt_json *j, const char *key) { open_container(j, key, "{"); }
void mt_json_array(mt_json *j, const char *key) { open_container(j, key, "["); }

void mt_json_end(mt_json *j, char close)
{
    mt_out_write(j->o, &close, 1);
    if (j->depth > 0) j->depth--;
    if (j->depth == 0) mt_out_write(j->o, "\n", 1);
}

void mt_json_u64(mt_json *j, const char *key, uint64_t v)
{
    member(j, key);
    mt_out_printf(j->o, "%llu", (unsigned long long)v);
}

void mt_json_i64(mt_json *j, const char *key, int64_t v)
{
    member(j, key);
    mt_out_printf(j->o, "%lld", (long long)v);
}

void mt_json_double(mt_json *j, const char *key, double v)
{
    member(j, key);
    if (isfinite(v)) mt_out_printf(j->o, "%.6g", v);
    else mt_out_puts(j->o, "null");
}

void mt_json_str(mt_json *j, const char *key, const char *s)
{
    member(j, key);
    mt_out_json_string(j->o, s ? s : "");
}

void mt_json_bool(mt_json *j, const char *key, int v)
{
    member(j, key);
    mt_out_puts(j->o, v ? "true" : "false");
}

void mt_json_null(mt_json *j, const char *key)
{
    member(j, key);
    mt_out_puts(j->o, "null");
}
