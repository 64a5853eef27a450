/* Markdown pieces for GitHub (`$GITHUB_STEP_SUMMARY`, pull-request comments): GitHub Flavored
 * Markdown as cmark-gfm reads it.
 *
 * Everything that comes from a trace (frame names, file names, command lines) goes into a code
 * span, where nothing is markup: "Module.to.<locals>.convert" would otherwise be an HTML tag that
 * GitHub strips, "_multi_tensor_sgd" emphasis. Inside a table a '|' still ends the cell, even in a
 * code span, unless written "\|" (GFM: the table is split before inlines are parsed, and "\|" in a
 * code span reads as "|"); outside a table the same "\|" would show its backslash, so spans there
 * (mt_md_code_span) keep '|'. A backtick in the text makes the span's fence one backtick longer
 * than its longest run. Control characters become spaces (a newline would end the table row) and
 * bytes that are not UTF-8 become U+FFFD.
 */
#include <string.h>

#include "util.h"

/* Length of the valid UTF-8 sequence at p (1..4), 0 when invalid. */
static size_t utf8_seq(const unsigned char *p)
{
    if (p[0] < 0x80) return 1;
    size_t n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
    if (!n || (n == 4 && p[0] > 0xf4)) return 0;
    for (size_t k = 1; k < n; k++)
        if ((p[k] & 0xc0) != 0x80) return 0;
    if (n == 3 && p[0] == 0xe0 && p[1] < 0xa0) return 0; /* overlong */
    if (n == 3 && p[0] == 0xed && p[1] >= 0xa0) return 0; /* surrogates */
    if (n == 4 && p[0] == 0xf0 && p[1] < 0x90) return 0;
    if (n == 4 && p[0] == 0xf4 && p[1] >= 0x90) return 0;
    return n;
}

/* s with control characters as spaces, invalid UTF-8 replaced; '|' escaped when in_table (in a
 * code span outside a table "\|" would show its backslash); markup characters escaped when
 * escape_markup. */
static void cell_text(mt_out *o, const char *s, int in_table, int escape_markup)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '|' && in_table) {
            mt_out_write(o, "\\|", 2);
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            mt_out_write(o, " ", 1);
            p++;
        } else if (escape_markup && strchr("\\`*_{}[]<>()#+-.!~&", *p)) {
            char esc[2] = {'\\', (char)*p++};
            mt_out_write(o, esc, 2);
        } else {
            size_t n = utf8_seq(p);
            if (n) {
                mt_out_write(o, p, n);
                p += n;
            } else {
                mt_out_puts(o, "\xef\xbf\xbd");
                p++;
            }
        }
    }
}

static void code_span(mt_out *o, const char *s, int in_table)
{
    if (!s || !*s) {
        mt_out_puts(o, "` `"); /* an empty span would print its backticks */
        return;
    }
    size_t longest = 0, run = 0;
    for (const char *p = s; *p; p++) {
        run = *p == '`' ? run + 1 : 0;
        if (run > longest) longest = run;
    }
    char fence[16];
    size_t nf = longest + 1 < sizeof fence ? longest + 1 : sizeof fence - 1;
    memset(fence, '`', nf);
    fence[nf] = 0;
    /* a span starting or ending with a backtick needs a space inside the fence (stripped again) */
    size_t len = strlen(s);
    int pad = s[0] == '`' || s[len - 1] == '`' || (s[0] == ' ' && s[len - 1] == ' ');
    mt_out_puts(o, fence);
    if (pad) mt_out_write(o, " ", 1);
    cell_text(o, s, in_table, 0);
    if (pad) mt_out_write(o, " ", 1);
    mt_out_puts(o, fence);
}

void mt_md_html(mt_out *o, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        const char *esc = *p == '<' ? "&lt;" : *p == '>' ? "&gt;" : *p == '&' ? "&amp;" : NULL;
        if (esc) {
            mt_out_puts(o, esc);
            p++;
        } else if (*p < 0x20 || *p == 0x7f) {
            mt_out_write(o, " ", 1);
            p++;
        } else {
            size_t n = utf8_seq(p);
            mt_out_write(o, n ? (const char *)p : "\xef\xbf\xbd", n ? n : 3);
            p += n ? n : 1;
        }
    }
}

const char *mt_md_nbsp(const char *s, char *buf, size_t len)
{
    size_t w = 0;
    for (; *s && w + 3 < len; s++) {
        if (*s == ' ') {
            memcpy(buf + w, "\xc2\xa0", 2);
            w += 2;
        } else {
            buf[w++] = *s;
        }
    }
    buf[w] = 0;
    return buf;
}

void mt_md_code(mt_out *o, const char *s) { code_span(o, s, 1); }
void mt_md_code_span(mt_out *o, const char *s) { code_span(o, s, 0); }
void mt_md_text(mt_out *o, const char *s) { cell_text(o, s ? s : "", 1, 1); }

void mt_md_chain(mt_out *o, const char *const *names, const uint8_t *flags, size_t n)
{
    size_t idx[MT_CHAIN_MAX];
    int cut;
    size_t k = mt_chain_pick(names, flags, n, idx, &cut);
    if (cut) mt_out_puts(o, "… › ");
    for (size_t i = 0; i < k; i++) {
        if (i) mt_out_puts(o, " › ");
        mt_md_code(o, names[idx[i]]);
    }
}
