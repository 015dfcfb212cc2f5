/* chat_json.c — the JSON text chat templates write: Python's json.dumps(v, ensure_ascii=False)
 * (transformers' tojson filter), byte for byte: ", " and ": " separators, keys in document
 * order, only '"', '\\' and control characters escaped, floats as Python's repr. Used by the
 * renderers (chat_render.c) for tools and tool-call arguments; no shared state. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/chat_impl.h"

static void put_str(struct chat_out *o, const char *s, size_t n) {
    co_put(o, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char u[8];
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                e = u;
            }
        }
        if (e) co_put(o, e);
        else co_putn(o, s + i, 1);
    }
    co_put(o, "\"");
}

/* Python repr(float): the shortest digits that read back the same; exponent form below 1e-4 and
 * from 1e16; "1.0" for integral values. */
static void put_real(struct chat_out *o, double x) {
    char b[40];
    if (isnan(x)) return co_put(o, "NaN");
    if (isinf(x)) return co_put(o, x > 0 ? "Infinity" : "-Infinity");
    int p = 1;
    for (; p < 17; p++) {
        snprintf(b, sizeof b, "%.*e", p - 1, x);
        if (strtod(b, NULL) == x) break;
    }
    snprintf(b, sizeof b, "%.*e", p - 1, x); /* d.ddde±XX */
    char digits[24];
    int nd = 0, neg = b[0] == '-';
    for (const char *q = b + neg; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(strchr(b, 'e') + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[48];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp < -4 || exp >= 16) {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        out[k++] = '0', out[k++] = '.';
        for (int i = 0; i < -exp - 1; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
        for (int i = 0; i <= exp; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++) out[k++] = digits[i];
        else
            out[k++] = '0';
    }
    co_putn(o, out, (size_t)k);
}

char *ft_chat_tojson(const char *text) {
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    if (!v) return NULL;
    struct chat_out o = {0};
    co_pyjson(&o, v);
    co_putn(&o, "", 0);
    json_decref(v);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}

/* json.dumps(v, ensure_ascii=False, indent=n) at nesting depth `level`: "," + newline + spaces
 * between items, ": " after keys, empty containers as "{}" / "[]". */
void co_pyjson_indent(struct chat_out *o, const struct json_t *cv, int indent, int level) {
    json_t *v = (json_t *)cv, *e;
    const int is_obj = json_is_object(v);
    if (!(is_obj || json_is_array(v)) || !(is_obj ? json_object_size(v) : json_array_size(v))) {
        co_pyjson(o, v);
        return;
    }
    const char *key;
    size_t i = 0, k;
    co_put(o, is_obj ? "{" : "[");
    if (is_obj) {
        json_object_foreach(v, key, e) {
            co_put(o, i++ ? ",\n" : "\n");
            for (k = 0; k < (size_t)(indent * (level + 1)); k++) co_put(o, " ");
            put_str(o, key, strlen(key));
            co_put(o, ": ");
            co_pyjson_indent(o, e, indent, level + 1);
        }
    } else {
        json_array_foreach(v, k, e) {
            co_put(o, k ? ",\n" : "\n");
            for (i = 0; i < (size_t)(indent * (level + 1)); i++) co_put(o, " ");
            co_pyjson_indent(o, e, indent, level + 1);
        }
    }
    co_put(o, "\n");
    for (k = 0; k < (size_t)(indent * level); k++) co_put(o, " ");
    co_put(o, is_obj ? "}" : "]");
}

/* Python repr() of a str: single quotes unless the text holds ' and no " */
static void put_pyrepr_str(struct chat_out *o, const char *s, size_t n) {
    const char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    co_putn(o, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char u[8];
        if (c == '\\' || c == (unsigned char)q) co_put(o, "\\"), co_putn(o, s + i, 1);
        else if (c == '\n') co_put(o, "\\n");
        else if (c == '\r') co_put(o, "\\r");
        else if (c == '\t') co_put(o, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(u, sizeof u, "\\x%02x", c), co_put(o, u);
        else co_putn(o, s + i, 1);
    }
    co_putn(o, &q, 1);
}

/* v as json.dumps(v, ensure_ascii=False) writes it (repr 0), or as Python's repr() of the value
 * writes it (repr 1: quoted strs, True / False / None): the same walk, other leaves. */
static void co_pyvalue(struct chat_out *o, json_t *v, int repr) {
    char b[32];
    size_t i;
    const char *key;
    json_t *e;
    int first = 1;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        co_put(o, "{");
        json_object_foreach(v, key, e) {
            if (!first) co_put(o, ", ");
            first = 0;
            if (repr) put_pyrepr_str(o, key, strlen(key));
            else put_str(o, key, strlen(key));
            co_put(o, ": ");
            co_pyvalue(o, e, repr);
        }
        co_put(o, "}");
        break;
    case JSON_ARRAY:
        co_put(o, "[");
        json_array_foreach(v, i, e) {
            if (i) co_put(o, ", ");
            co_pyvalue(o, e, repr);
        }
        co_put(o, "]");
        break;
    case JSON_STRING:
        if (repr) put_pyrepr_str(o, json_string_value(v), json_string_length(v));
        else put_str(o, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(v));
        co_put(o, b);
        break;
    case JSON_REAL: put_real(o, json_real_value(v)); break;
    case JSON_TRUE: co_put(o, repr ? "True" : "true"); break;
    case JSON_FALSE: co_put(o, repr ? "False" : "false"); break;
    case JSON_NULL: co_put(o, repr ? "None" : "null"); break;
    }
}

void co_pyjson(struct chat_out *o, const struct json_t *v) { co_pyvalue(o, (json_t *)v, 0); }

void co_pystr(struct chat_out *o, const struct json_t *cv) {
    json_t *v = (json_t *)cv;
    switch (json_typeof(v)) {
    case JSON_STRING: co_putn(o, json_string_value(v), json_string_length(v)); break;
    case JSON_TRUE: co_put(o, "True"); break;
    case JSON_FALSE: co_put(o, "False"); break;
    case JSON_NULL: co_put(o, "None"); break;
    case JSON_INTEGER:
    case JSON_REAL: co_pyjson(o, v); break;
    default: co_pyvalue(o, v, 1); break;
    }
}
