/* json.c: a small strict JSON reader for manifest.json (top-level scalars only). */
#include <ctype.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/internal.h"

struct P {
    const char *s;
    size_t n, i;
    int depth;
    char *err;
    size_t errlen;
    const char *key; /* the top-level member being read */
    char *nonfinite; /* where to note the first top-level key holding a non-finite number */
};

static int fail(struct P *p, const char *what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') { line++; col = 1; } else col++;
    }
    return frt_seterr(p->err, p->errlen, "line %zu column %zu: %s", line, col, what);
}

static void ws(struct P *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

/* string into out (truncated to outlen-1; \u escapes outside ASCII become '?') */
static int str(struct P *p, char *out, size_t outlen) {
    size_t o = 0;
    if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a string");
    p->i++;
    while (p->i < p->n) {
        char c = p->s[p->i++];
        if (c == '"') {
            if (out && outlen) out[o < outlen ? o : outlen - 1] = 0;
            return 0;
        }
        if ((unsigned char)c < 0x20) return fail(p, "control character in a string");
        if (c == '\\') {
            if (p->i >= p->n) break;
            char e = p->s[p->i++];
            switch (e) {
            case '"': case '\\': case '/': c = e; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                if (p->i + 4 > p->n) return fail(p, "bad \\u escape");
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    char h = p->s[p->i++];
                    if (!isxdigit((unsigned char)h)) return fail(p, "bad \\u escape");
                    v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            default: return fail(p, "bad escape in a string");
            }
        }
        if (out && o + 1 < outlen) out[o] = c;
        o++;
    }
    return fail(p, "unterminated string");
}

static int number(struct P *p, double *v) {
    size_t st = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) return fail(p, "expected a value");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) return fail(p, "bad number");
        while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) return fail(p, "bad number");
        while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) p->i++;
    }
    char buf[64];
    size_t len = p->i - st;
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, p->s + st, len);
    buf[len] = 0;
    *v = strtod(buf, NULL);
    if (!isfinite(*v) && p->nonfinite && !p->nonfinite[0] && p->key) snprintf(p->nonfinite, 64, "%s", p->key);
    return 0;
}

static int lit(struct P *p, const char *w) {
    size_t k = strlen(w);
    if (p->i + k > p->n || memcmp(p->s + p->i, w, k) != 0) return fail(p, "expected a value");
    p->i += k;
    return 0;
}

static int value(struct P *p, struct frt_json_member *m);

static int object_or_array(struct P *p, struct frt_json_object *top) {
    char open = p->s[p->i], close = open == '{' ? '}' : ']';
    if (++p->depth > 64) return fail(p, "nesting too deep");
    p->i++;
    ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return 0;
    }
    for (;;) {
        struct frt_json_member m;
        memset(&m, 0, sizeof m);
        ws(p);
        if (open == '{') {
            if (str(p, m.key, sizeof m.key) != 0) return -1;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return fail(p, "expected ':'");
            p->i++;
            ws(p);
        }
        if (top && open == '{') p->key = m.key;
        m.off = p->i;
        if (value(p, &m) != 0) return -1;
        m.len = p->i - m.off;
        if (top && open == '{') {
            p->key = NULL;
            if (top->n >= (int)(sizeof top->members / sizeof top->members[0]))
                return fail(p, "too many members");
            top->members[top->n++] = m;
        }
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; break; }
        return fail(p, open == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->depth--;
    return 0;
}

static int value(struct P *p, struct frt_json_member *m) {
    if (p->i >= p->n) return fail(p, "unexpected end");
    char c = p->s[p->i];
    if (c == '"') { m->type = FRT_JSON_STRING; return str(p, m->str, sizeof m->str); }
    if (c == '{' || c == '[') { m->type = FRT_JSON_NESTED; return object_or_array(p, NULL); }
    if (c == 't') { m->type = FRT_JSON_BOOL; m->num = 1; return lit(p, "true"); }
    if (c == 'f') { m->type = FRT_JSON_BOOL; m->num = 0; return lit(p, "false"); }
    if (c == 'n') { m->type = FRT_JSON_NULL; m->num = NAN; return lit(p, "null"); }
    m->type = FRT_JSON_NUMBER;
    return number(p, &m->num);
}

int frt_json_parse_object(const char *text, size_t len, struct frt_json_object *out, char *err,
                          size_t errlen) {
    memset(out, 0, sizeof *out);
    struct P p = {text, len, 0, 0, err, errlen, NULL, out->nonfinite};
    ws(&p);
    if (p.i >= p.n || p.s[p.i] != '{') return fail(&p, "expected a JSON object");
    if (object_or_array(&p, out) != 0) return -1;
    ws(&p);
    if (p.i != p.n) return fail(&p, "trailing characters after the object");
    return 0;
}

const struct frt_json_member *frt_json_get(const struct frt_json_object *o, const char *key) {
    for (int i = o->n - 1; i >= 0; i--) /* last duplicate wins, as in Python */
        if (strcmp(o->members[i].key, key) == 0) return &o->members[i];
    return NULL;
}
