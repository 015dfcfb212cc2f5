/* json_grammar.c — JSON Schema -> byte-level pushdown matcher -> token mask (json_grammar.h).
 * A compiled grammar is a table of nodes (object, array, string, number, integer, literal set,
 * union, tool call, tagged/XML tool call, raw XML parameter text); the matcher is a stack of
 * frames, one per open value, each with a phase.
 * A frame that ends on a closing byte (string, object, array, a literal nothing else extends)
 * pops itself; a number (or a literal another one extends) stays until a byte it cannot take,
 * which then goes to the frame below. Feeding a token = feeding its bytes to a copy of the state.
 * Compiling runs on the caller's thread; a compiled grammar is read-only afterwards. */
#include "text/json_grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define MAX_SET 64 /* properties, literals, tools per node (bit masks) */
#define MAX_NUM 32 /* bytes of a number */
#define NO_LIMIT 0xffffffffu

enum nk { NK_OBJECT, NK_ARRAY, NK_STRING, NK_NUMBER, NK_INTEGER, NK_LIT, NK_UNION, NK_CALL,
          NK_XCALL, NK_RAW };

struct prop {
    char *name;
    size_t len;
    int node;
};

struct node {
    enum nk k;
    /* object */
    struct prop *props;
    int n_props, addl;   /* addl: node of other keys' values, -1 = none allowed */
    uint64_t req;        /* required properties */
    /* array */
    int items;
    uint32_t min_items, max_items;
    /* string */
    uint32_t min_len, max_len;
    /* literal set (enum/const/true/false/null), also the tool names of a call */
    char **lits;
    size_t *lit_len;
    int n_lits;
    /* union */
    int *alts;
    int n_alts;
    /* call, xcall: lits are the names, args[i] the arguments node of tool i (xcall of the XML
     * kind: an object node whose property nodes are the values, NK_RAW for raw text) */
    int *args;
};

/* The texts of a tagged / XML call (ft_jg_calls_fmt); the first two are the choices after a
 * parameter (narrowed together). */
enum { XS_PARAM_OPEN, XS_CALL_END, XS_NAME_END, XS_PNAME_END, XS_VALUE_END, XS_PARAM_END,
       XS_VEND_PEND, XS_N };

struct ft_jg {
    struct node *nodes;
    int n_nodes, cap;
    int root;       /* value grammar: the value; calls grammar: the call node */
    int calls;
    int any;        /* node of any value (-1 until needed) */
    char *lit[4];   /* calls: open, sep, close, close_alt */
    size_t lit_len[4];
    char *key1, *key2; /* "\"name\"", "\"arguments\"" */
    size_t key1_len, key2_len;
    enum ft_jg_calls_kind kind;
    char *xs[XS_N];    /* tagged / XML calls: the texts around names, arguments, parameters */
    size_t xs_len[XS_N];
    int value_no_nl;
    char *forbid[FT_JG_MAX_FORBID]; /* texts no string may hold */
    size_t forbid_len[FT_JG_MAX_FORBID];
    int n_forbid, any_first;
    uint8_t first[256]; /* first bytes of the forbidden texts and of the raw value's end */
};

/* ---------------------------------------------------------------- compiling */

/* The status of the last compile error (compile functions return -1 and set the message). */
static _Thread_local enum ft_status t_st;
#define jfail(st_, ...) (t_st = ft_fail(st_, __VA_ARGS__))


static int new_node(struct ft_jg *g, enum nk k) {
    if (g->n_nodes == g->cap) {
        int cap = g->cap ? g->cap * 2 : 16;
        struct node *p = realloc(g->nodes, (size_t)cap * sizeof *p);
        if (!p) return -1;
        g->nodes = p, g->cap = cap;
    }
    struct node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->k = k;
    n->addl = -1;
    n->items = -1;
    n->max_items = n->max_len = NO_LIMIT;
    return g->n_nodes++;
}

static int add_lit(struct ft_jg *g, int idx, const char *s, size_t len) {
    struct node *n = &g->nodes[idx];
    if (n->n_lits >= MAX_SET) return -1;
    char **l = realloc(n->lits, (size_t)(n->n_lits + 1) * sizeof *l);
    if (!l) return -1;
    n->lits = l;
    size_t *ll = realloc(n->lit_len, (size_t)(n->n_lits + 1) * sizeof *ll);
    if (!ll) return -1;
    n->lit_len = ll;
    if (!(l[n->n_lits] = malloc(len + 1))) return -1;
    memcpy(l[n->n_lits], s, len);
    l[n->n_lits][len] = 0;
    ll[n->n_lits++] = len;
    return 0;
}

static int add_alt(struct ft_jg *g, int idx, int alt) {
    struct node *n = &g->nodes[idx];
    int *a = realloc(n->alts, (size_t)(n->n_alts + 1) * sizeof *a);
    if (!a) return -1;
    n->alts = a;
    a[n->n_alts++] = alt;
    return 0;
}

/* Bytes a value of node i may begin with. */
static void first_set(const struct ft_jg *g, int i, uint8_t set[256], int depth) {
    const struct node *n = &g->nodes[i];
    if (depth > 16) return;
    switch (n->k) {
    case NK_OBJECT: case NK_CALL: set['{'] = 1; break;
    case NK_RAW:
        for (int c = 1; c < 256; c++) set[c] = 1;
        break;
    case NK_ARRAY: set['['] = 1; break;
    case NK_STRING: set['"'] = 1; break;
    case NK_NUMBER: case NK_INTEGER:
        set['-'] = 1;
        for (int c = '0'; c <= '9'; c++) set[c] = 1;
        break;
    case NK_LIT: case NK_XCALL:
        for (int j = 0; j < n->n_lits; j++) set[(unsigned char)n->lits[j][0]] = 1;
        break;
    case NK_UNION:
        for (int j = 0; j < n->n_alts; j++) first_set(g, n->alts[j], set, depth + 1);
        break;
    }
}

static int any_node(struct ft_jg *g) {
    if (g->any >= 0) return g->any;
    int u = new_node(g, NK_UNION);
    if (u < 0) return -1;
    g->any = u;
    int o = new_node(g, NK_OBJECT), a = new_node(g, NK_ARRAY), s = new_node(g, NK_STRING),
        num = new_node(g, NK_NUMBER), l = new_node(g, NK_LIT);
    if (o < 0 || a < 0 || s < 0 || num < 0 || l < 0) return -1;
    g->nodes[o].addl = u;
    g->nodes[a].items = u;
    if (add_lit(g, l, "true", 4) || add_lit(g, l, "false", 5) || add_lit(g, l, "null", 4) ||
        add_alt(g, u, o) || add_alt(g, u, a) || add_alt(g, u, s) || add_alt(g, u, num) ||
        add_alt(g, u, l))
        return -1;
    return u;
}

struct cc {
    struct ft_jg *g;
    const json_t *root;
    int strict;
    struct { char *ref; int node; } memo[64];
    int n_memo;
    int depth;
};

static const char *const k_keywords[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions", "minLength", "maxLength",
    /* annotations */
    "title", "description", "default", "examples", "format", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", NULL};

static int oom(void) {
    jfail(FT_ERR_OOM, "json schema: out of memory");
    return -1;
}

static int compile(struct cc *c, const json_t *s, const char *ptr);

static int check_keywords(struct cc *c, const json_t *s, const char *ptr) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        int known = 0;
        for (int i = 0; k_keywords[i] && !known; i++) known = !strcmp(key, k_keywords[i]);
        if (!known && c->strict) {
            jfail(FT_ERR_UNSUPPORTED, "json schema: keyword \"%s\" at %s is not supported "
                    "(supported: type, properties, required, additionalProperties, items, "
                    "minItems, maxItems, enum, const, anyOf, oneOf, $ref, $defs, minLength, "
                    "maxLength)", key, ptr);
            return -1;
        }
    }
    return 0;
}

static int get_u32(const json_t *s, const char *key, uint32_t *out, const char *ptr) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000) {
        jfail(FT_ERR_INVALID_ARG, "json schema: %s at %s must be an integer in [0, 1000000]",
                key, ptr);
        return -1;
    }
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int compile_lits(struct cc *c, const json_t *s, const char *ptr) {
    int idx = new_node(c->g, NK_LIT);
    if (idx < 0) return oom();
    json_t *e = json_object_get(s, "enum"), *v;
    size_t i;
    if (e && (!json_is_array(e) || !json_array_size(e) || json_array_size(e) > MAX_SET)) {
        jfail(FT_ERR_INVALID_ARG, "json schema: enum at %s must be a list of 1 to %d values",
                ptr, MAX_SET);
        return -1;
    }
    json_t *one = json_array();
    if (!one) return oom();
    if (!e) json_array_append(one, json_object_get(s, "const"));
    json_array_foreach(e ? e : one, i, v) {
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        int bad = !t || add_lit(c->g, idx, t, strlen(t));
        free(t);
        if (bad) {
            json_decref(one);
            return oom();
        }
    }
    json_decref(one);
    return idx;
}

static int compile_object(struct cc *c, const json_t *s, const char *ptr) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        jfail(FT_ERR_INVALID_ARG, "json schema: properties at %s must be an object", ptr);
        return -1;
    }
    if (json_object_size(props) > MAX_SET) {
        jfail(FT_ERR_UNSUPPORTED, "json schema: at most %d properties per object (%s has %zu)",
                MAX_SET, ptr, json_object_size(props));
        return -1;
    }
    int idx = new_node(c->g, NK_OBJECT);
    if (idx < 0) return oom();
    struct prop *pv = calloc(json_object_size(props) + 1, sizeof *pv);
    if (!pv) return oom();
    c->g->nodes[idx].props = pv;
    const char *key;
    json_t *v;
    int n = 0;
    json_object_foreach(props, key, v) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/properties/%s", ptr, key);
        if (strchr(key, '"') || strchr(key, '\\')) {
            jfail(FT_ERR_UNSUPPORTED, "json schema: property name at %s has a quote or "
                    "backslash", sub);
            return -1;
        }
        int child = compile(c, v, sub);
        if (child < 0) return -1;
        pv = c->g->nodes[idx].props; /* compile may have moved the node table, not this array */
        if (!(pv[n].name = strdup(key))) return oom();
        pv[n].len = strlen(key);
        pv[n].node = child;
        c->g->nodes[idx].n_props = ++n;
    }
    if (req && !json_is_array(req)) {
        jfail(FT_ERR_INVALID_ARG, "json schema: required at %s must be a list of names", ptr);
        return -1;
    }
    size_t i;
    json_array_foreach(req, i, v) {
        int found = -1;
        for (int j = 0; j < n && json_is_string(v); j++)
            if (!strcmp(pv[j].name, json_string_value(v))) found = j;
        if (found < 0) {
            jfail(FT_ERR_INVALID_ARG, "json schema: required[%zu] at %s is not one of its "
                    "properties", i, ptr);
            return -1;
        }
        c->g->nodes[idx].req |= 1ull << found;
    }
    int a = -1;
    if (addl && json_is_object(addl)) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/additionalProperties", ptr);
        if ((a = compile(c, addl, sub)) < 0) return -1;
    } else if (json_is_true(addl) || (!addl && n == 0)) {
        /* absent: any key only for an object that declares none (declared ones otherwise, as
         * OpenAI's strict mode requires) */
        if ((a = any_node(c->g)) < 0) return oom();
    }
    c->g->nodes[idx].addl = a;
    return idx;
}

static int compile_array(struct cc *c, const json_t *s, const char *ptr) {
    json_t *items = json_object_get(s, "items");
    int child;
    if (items && !json_is_boolean(items)) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/items", ptr);
        child = compile(c, items, sub);
    } else {
        child = any_node(c->g);
    }
    if (child < 0) return -1;
    int idx = new_node(c->g, NK_ARRAY);
    if (idx < 0) return oom();
    struct node *n = &c->g->nodes[idx];
    n->items = child;
    if (json_is_false(items)) n->max_items = 0;
    if (get_u32(s, "minItems", &n->min_items, ptr) || get_u32(s, "maxItems", &n->max_items, ptr))
        return -1;
    if (n->min_items > n->max_items) {
        jfail(FT_ERR_INVALID_ARG, "json schema: minItems > maxItems at %s", ptr);
        return -1;
    }
    return idx;
}

static int compile_type(struct cc *c, const json_t *s, const char *type, const char *ptr) {
    int idx;
    if (!strcmp(type, "object")) return compile_object(c, s, ptr);
    if (!strcmp(type, "array")) return compile_array(c, s, ptr);
    if (!strcmp(type, "string")) {
        if ((idx = new_node(c->g, NK_STRING)) < 0) return oom();
        struct node *n = &c->g->nodes[idx];
        if (get_u32(s, "minLength", &n->min_len, ptr) || get_u32(s, "maxLength", &n->max_len, ptr))
            return -1;
        if (n->min_len > n->max_len) {
            jfail(FT_ERR_INVALID_ARG, "json schema: minLength > maxLength at %s", ptr);
            return -1;
        }
        return idx;
    }
    if (!strcmp(type, "number") || !strcmp(type, "integer")) {
        idx = new_node(c->g, type[0] == 'n' ? NK_NUMBER : NK_INTEGER);
        return idx < 0 ? oom() : idx;
    }
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        if ((idx = new_node(c->g, NK_LIT)) < 0) return oom();
        if (type[0] == 'b' ? add_lit(c->g, idx, "true", 4) || add_lit(c->g, idx, "false", 5)
                           : add_lit(c->g, idx, "null", 4))
            return oom();
        return idx;
    }
    jfail(FT_ERR_INVALID_ARG, "json schema: type \"%s\" at %s is not a JSON Schema type "
            "(object, array, string, number, integer, boolean, null)", type, ptr);
    return -1;
}

/* A union of alternatives that must begin differently; integer beside number is dropped (a
 * number covers it). Lenient: a later overlapping alternative is dropped. */
static int make_union(struct cc *c, const int *alts, int n, const char *ptr) {
    int idx = new_node(c->g, NK_UNION);
    if (idx < 0) return oom();
    uint8_t used[256] = {0};
    for (int i = 0; i < n; i++) {
        uint8_t set[256] = {0};
        first_set(c->g, alts[i], set, 0);
        int clash = 0;
        for (int b = 0; b < 256; b++) clash |= set[b] && used[b];
        if (clash) {
            enum nk k = c->g->nodes[alts[i]].k;
            if (k == NK_INTEGER || k == NK_NUMBER) {
                for (int j = 0; j < c->g->nodes[idx].n_alts; j++)
                    if (c->g->nodes[c->g->nodes[idx].alts[j]].k == NK_INTEGER)
                        c->g->nodes[idx].alts[j] = alts[i] ; /* number replaces integer */
                continue;
            }
            if (!c->strict) continue;
            jfail(FT_ERR_UNSUPPORTED, "json schema: the alternatives at %s overlap (anyOf/oneOf "
                    "or a type list must differ in the kind of value: object, array, string, "
                    "number, true/false, null)", ptr);
            return -1;
        }
        for (int b = 0; b < 256; b++) used[b] |= set[b];
        if (add_alt(c->g, idx, alts[i])) return oom();
    }
    return idx;
}

static int compile_ref(struct cc *c, const char *ref, const char *ptr) {
    for (int i = 0; i < c->n_memo; i++)
        if (!strcmp(c->memo[i].ref, ref)) return c->memo[i].node;
    const json_t *t = NULL;
    if (!strcmp(ref, "#")) t = c->root;
    else if (!strncmp(ref, "#/$defs/", 8)) t = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14))
        t = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
    if (!t) {
        jfail(FT_ERR_UNSUPPORTED, "json schema: $ref \"%s\" at %s: only local \"#/$defs/NAME\" "
                "or \"#/definitions/NAME\" references are supported", ref, ptr);
        return -1;
    }
    if (c->n_memo == 64) {
        jfail(FT_ERR_UNSUPPORTED, "json schema: more than 64 $ref targets");
        return -1;
    }
    /* a union of one alternative stands for the target, so a recursive $ref finds it */
    int idx = new_node(c->g, NK_UNION);
    if (idx < 0) return oom();
    if (!(c->memo[c->n_memo].ref = strdup(ref))) return oom();
    c->memo[c->n_memo++].node = idx;
    int target = compile(c, t, ref);
    if (target < 0) return -1;
    return add_alt(c->g, idx, target) ? oom() : idx;
}

static int compile_alts(struct cc *c, const json_t *list, const char *kw, const char *ptr) {
    if (!json_is_array(list) || !json_array_size(list) || json_array_size(list) > MAX_SET) {
        jfail(FT_ERR_INVALID_ARG, "json schema: %s at %s must be a list of 1 to %d schemas",
                kw, ptr, MAX_SET);
        return -1;
    }
    int alts[MAX_SET], n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s/%zu", ptr, kw, i);
        if ((alts[n++] = compile(c, v, sub)) < 0) return -1;
    }
    return n == 1 ? alts[0] : make_union(c, alts, n, ptr);
}

static int compile(struct cc *c, const json_t *s, const char *ptr) {
    if (json_is_true(s) || (json_is_object(s) && !json_object_size(s))) {
        int a = any_node(c->g);
        return a < 0 ? oom() : a;
    }
    if (!json_is_object(s)) {
        jfail(FT_ERR_INVALID_ARG, "json schema: the schema at %s must be an object", ptr);
        return -1;
    }
    if (++c->depth > 64) {
        jfail(FT_ERR_UNSUPPORTED, "json schema: nested more than 64 levels at %s", ptr);
        return -1;
    }
    int r = -1;
    json_t *type = json_object_get(s, "type"), *ref = json_object_get(s, "$ref");
    if (check_keywords(c, s, ptr)) goto done;
    if (json_is_string(ref)) {
        r = compile_ref(c, json_string_value(ref), ptr);
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        r = compile_lits(c, s, ptr);
    } else if (json_object_get(s, "anyOf")) {
        r = compile_alts(c, json_object_get(s, "anyOf"), "anyOf", ptr);
    } else if (json_object_get(s, "oneOf")) {
        r = compile_alts(c, json_object_get(s, "oneOf"), "oneOf", ptr);
    } else if (json_is_string(type)) {
        r = compile_type(c, s, json_string_value(type), ptr);
    } else if (json_is_array(type) && json_array_size(type) && json_array_size(type) <= 7) {
        int alts[7], n = 0;
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            if (!json_is_string(t)) break;
            if ((alts[n++] = compile_type(c, s, json_string_value(t), ptr)) < 0) goto done;
        }
        if (n != (int)json_array_size(type)) {
            jfail(FT_ERR_INVALID_ARG, "json schema: type at %s must be a name or a list of "
                    "names", ptr);
            goto done;
        }
        r = n == 1 ? alts[0] : make_union(c, alts, n, ptr);
    } else if (type) {
        jfail(FT_ERR_INVALID_ARG, "json schema: type at %s must be a name or a list of names",
                ptr);
    } else if (json_object_get(s, "properties")) {
        r = compile_object(c, s, ptr);
    } else if (json_object_get(s, "items")) {
        r = compile_array(c, s, ptr);
    } else {
        r = any_node(c->g);
        if (r < 0) oom();
    }
done:
    c->depth--;
    return r;
}

static struct ft_jg *jg_new(void) {
    struct ft_jg *g = calloc(1, sizeof *g);
    if (g) g->any = -1, g->root = -1;
    return g;
}

static void cc_free(struct cc *c) {
    for (int i = 0; i < c->n_memo; i++) free(c->memo[i].ref);
}

enum ft_status ft_jg_compile_schema(const json_t *schema, int strict, struct ft_jg **out) {
    *out = NULL;
    struct ft_jg *g = jg_new();
    if (!g) return jfail(FT_ERR_OOM, "json schema: out of memory");
    struct cc c = {.g = g, .root = schema, .strict = strict};
    g->root = compile(&c, schema, "#");
    cc_free(&c);
    if (g->root < 0) {
        enum ft_status st = t_st;
        ft_jg_free(g);
        return st;
    }
    *out = g;
    return FT_OK;
}

enum ft_status ft_jg_compile_object(struct ft_jg **out) {
    json_t *s = json_pack("{s:s}", "type", "object");
    enum ft_status st = s ? ft_jg_compile_schema(s, 1, out) : jfail(FT_ERR_OOM, "out of memory");
    json_decref(s);
    return st;
}

static char *dup_key(const char *k, size_t *len) {
    size_t n = strlen(k);
    char *s = malloc(n + 3);
    if (s) {
        s[0] = '"';
        memcpy(s + 1, k, n);
        s[n + 1] = '"';
        s[n + 2] = 0;
        *len = n + 2;
    }
    return s;
}

/* 1 when s[0..n) holds t[0..k). */
static int holds(const char *s, size_t n, const char *t, size_t k) {
    for (size_t i = 0; k && i + k <= n; i++)
        if (!memcmp(s + i, t, k)) return 1;
    return 0;
}

static int holds_first(const struct ft_jg *g, const char *s, size_t n) {
    for (size_t i = 0; g->any_first && i < n; i++)
        if (g->first[(unsigned char)s[i]]) return 1;
    return 0;
}

const char *ft_jg_prop_type(const json_t *params, const char *prop) {
    json_t *ty = json_object_get(json_object_get(json_object_get(params, "properties"), prop),
                                 "type");
    if (json_is_string(ty)) return json_string_value(ty);
    if (json_is_array(ty) && json_is_string(json_array_get(ty, 0)))
        return json_string_value(json_array_get(ty, 0));
    return "";
}

/* The texts of fmt into g (the calls kind, the forbidden texts and their first bytes). */
static int set_texts(struct ft_jg *g, const struct ft_jg_calls_fmt *fmt) {
    const char *l[4] = {fmt->open, fmt->sep, fmt->close, fmt->close_alt};
    for (int i = 0; i < 4; i++)
        if (l[i]) {
            if (!(g->lit[i] = strdup(l[i]))) return -1;
            g->lit_len[i] = strlen(l[i]);
        }
    g->kind = fmt->kind;
    g->value_no_nl = fmt->value_no_nl;
    if (fmt->kind != FT_JG_CALLS_JSON) {
        const char *x[XS_N] = {fmt->param_open, fmt->call_end, fmt->name_end,
                               fmt->param_name_end, fmt->value_end, fmt->param_end, NULL};
        for (int i = 0; i < XS_VEND_PEND; i++)
            if (!(g->xs[i] = strdup(x[i] ? x[i] : ""))) return -1;
        size_t a = strlen(g->xs[XS_VALUE_END]), b = strlen(g->xs[XS_PARAM_END]);
        if (!(g->xs[XS_VEND_PEND] = malloc(a + b + 1))) return -1;
        memcpy(g->xs[XS_VEND_PEND], g->xs[XS_VALUE_END], a);
        memcpy(g->xs[XS_VEND_PEND] + a, g->xs[XS_PARAM_END], b + 1);
        for (int i = 0; i < XS_N; i++) g->xs_len[i] = strlen(g->xs[i]);
        if (g->xs_len[XS_VALUE_END]) g->first[(unsigned char)g->xs[XS_VALUE_END][0]] = 1;
    }
    for (const char *const *f = fmt->forbid; f && *f && g->n_forbid < FT_JG_MAX_FORBID; f++) {
        if (!**f || !(g->forbid[g->n_forbid] = strdup(*f))) return **f ? -1 : 0;
        g->forbid_len[g->n_forbid] = strlen(*f);
        g->first[(unsigned char)(*f)[0]] = 1;
        g->n_forbid++;
    }
    for (int c = 0; c < 256; c++) g->any_first |= g->first[c];
    return 0;
}

/* A name written raw (tagged / XML calls) must read back: no blanks, no <>" and not the byte
 * that ends it. */
static int raw_name_ok(const char *name, const char *end) {
    return *name && !strpbrk(name, " \t\r\n<>\"") && !strchr(name, end[0]);
}

/* A raw enum value: not empty, no NUL, nothing the parser would stop at. */
static int raw_lit_ok(const struct ft_jg *g, const char *s, size_t n) {
    if (!n || memchr(s, 0, n) || memchr(s, g->xs[XS_VALUE_END][0], n)) return 0;
    if (g->value_no_nl && (s[0] == '\n' || s[n - 1] == '\n')) return 0;
    for (int i = 0; i < g->n_forbid; i++)
        if (holds(s, n, g->forbid[i], g->forbid_len[i])) return 0;
    return 1;
}

/* The raw (unquoted) form of value node i for an XML parameter, or -1 when it has none. */
static int raw_node(struct ft_jg *g, int i, int depth) {
    if (depth > 8) return -1;
    enum nk k = g->nodes[i].k;
    if (i == g->any || k == NK_STRING) {
        int r = new_node(g, NK_RAW);
        if (r >= 0 && i != g->any)
            g->nodes[r].min_len = g->nodes[i].min_len, g->nodes[r].max_len = g->nodes[i].max_len;
        return r;
    }
    if (k == NK_UNION) {
        for (int j = 0; j < g->nodes[i].n_alts; j++) {
            int r = raw_node(g, g->nodes[i].alts[j], depth + 1);
            if (r >= 0) return r;
        }
        return -1;
    }
    if (k != NK_LIT) return -1;
    int r = new_node(g, NK_LIT);
    for (int j = 0; r >= 0 && j < g->nodes[i].n_lits; j++) {
        json_t *v = json_loadb(g->nodes[i].lits[j], g->nodes[i].lit_len[j], JSON_DECODE_ANY, NULL);
        if (json_is_string(v) && raw_lit_ok(g, json_string_value(v), json_string_length(v)) &&
            add_lit(g, r, json_string_value(v), json_string_length(v)))
            r = -1;
        json_decref(v);
    }
    return r >= 0 && g->nodes[r].n_lits ? r : -1;
}

/* The XML kind's arguments of tool ti: an object node whose property nodes are the values as
 * written (raw text or JSON); node a is the compiled parameters schema. */
static int xml_args(struct ft_jg *g, int a, const json_t *params, size_t ti, const char *fn,
                    const struct ft_jg_calls_fmt *fmt) {
    while (g->nodes[a].k == NK_UNION && g->nodes[a].n_alts == 1 && a != g->any)
        a = g->nodes[a].alts[0]; /* a $ref */
    int x = new_node(g, NK_OBJECT);
    if (x < 0) return oom();
    if (a == g->any) return x; /* any object: written with no parameters */
    if (g->nodes[a].k != NK_OBJECT) {
        jfail(FT_ERR_UNSUPPORTED, "tools[%zu] (%s): the %s format writes parameters one by one, "
              "so parameters must be an object schema", ti, fn, fmt->name);
        return -1;
    }
    int n = g->nodes[a].n_props;
    struct prop *pv = calloc((size_t)n + 1, sizeof *pv);
    if (!pv) return oom();
    g->nodes[x].props = pv;
    g->nodes[x].req = g->nodes[a].req;
    for (int j = 0; j < n; j++) {
        const char *pn = g->nodes[a].props[j].name;
        if (!raw_name_ok(pn, g->xs[XS_PNAME_END])) {
            jfail(FT_ERR_UNSUPPORTED, "tools[%zu] (%s): parameter name '%s' cannot be written in "
                  "the %s format (no blanks, <, > or \")", ti, fn, pn, fmt->name);
            return -1;
        }
        const char *ty = ft_jg_prop_type(params, pn);
        int v = g->nodes[a].props[j].node;
        if (!*ty || !strcmp(ty, "string")) v = raw_node(g, v, 0);
        if (v < 0) {
            jfail(FT_ERR_UNSUPPORTED, "tools[%zu] (%s): parameter '%s' is written as raw text in "
                  "the %s format, but its schema admits no such string: give it a \"type\"",
                  ti, fn, pn, fmt->name);
            return -1;
        }
        pv = g->nodes[x].props;
        if (!(pv[j].name = strdup(pn))) return oom();
        pv[j].len = strlen(pn);
        pv[j].node = v;
        g->nodes[x].n_props = j + 1;
    }
    return x;
}

/* Forbidden texts: enum values holding one are dropped, property names with their first bytes
 * refused (a free key may not take those bytes either: object_byte). */
static int forbid_pass(struct ft_jg *g, int call) {
    for (int i = 0; g->n_forbid && i < g->n_nodes; i++) {
        struct node *n = &g->nodes[i];
        for (int j = 0; j < n->n_props; j++)
            if (holds_first(g, n->props[j].name, n->props[j].len)) {
                jfail(FT_ERR_UNSUPPORTED, "tools: property name '%s' holds a character the "
                      "tool-call format reserves", n->props[j].name);
                return -1;
            }
        if (n->k != NK_LIT || i == call) continue;
        int k = 0;
        for (int j = 0; j < n->n_lits; j++) {
            int bad = 0;
            for (int f = 0; f < g->n_forbid; f++)
                bad |= holds(n->lits[j], n->lit_len[j], g->forbid[f], g->forbid_len[f]);
            if (bad) {
                free(n->lits[j]);
                continue;
            }
            n->lits[k] = n->lits[j], n->lit_len[k++] = n->lit_len[j];
        }
        n->n_lits = k;
        if (!k) {
            jfail(FT_ERR_UNSUPPORTED, "tools: every value of an enum holds a text the tool-call "
                  "format reserves");
            return -1;
        }
    }
    return 0;
}

enum ft_status ft_jg_compile_calls(const json_t *tools, const char *only,
                                   const struct ft_jg_calls_fmt *fmt, struct ft_jg **out) {
    *out = NULL;
    struct ft_jg *g = jg_new();
    if (!g) return jfail(FT_ERR_OOM, "tool grammar: out of memory");
    enum ft_status st = FT_OK;
    g->calls = 1;
    if (set_texts(g, fmt)) goto oom;
    if (fmt->kind != FT_JG_CALLS_JSON && (!g->xs_len[XS_NAME_END] ||
        (fmt->kind == FT_JG_CALLS_XML && (!g->xs_len[XS_CALL_END] || !g->xs_len[XS_PARAM_OPEN] ||
                                          !g->xs_len[XS_PNAME_END] || !g->xs_len[XS_VALUE_END])))) {
        st = jfail(FT_ERR_INVALID_ARG, "tool grammar: the %s format lacks a marker", fmt->name);
        goto fail;
    }
    if (!(g->key1 = dup_key("name", &g->key1_len)) ||
        !(g->key2 = dup_key(fmt->args_key ? fmt->args_key : "arguments", &g->key2_len)))
        goto oom;
    int call = new_node(g, fmt->kind == FT_JG_CALLS_JSON ? NK_CALL : NK_XCALL);
    if (call < 0) goto oom;
    g->root = call;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(name, only))) continue;
        json_t *params = json_object_get(fn, "parameters");
        struct cc c = {.g = g, .root = params, .strict = 0};
        char ptr[300];
        snprintf(ptr, sizeof ptr, "tools[%zu].function.parameters", i);
        int a = params ? compile(&c, params, ptr) : -2;
        cc_free(&c);
        if (a == -2) { /* no parameters: any object */
            json_t *o = json_pack("{s:s}", "type", "object");
            struct cc c2 = {.g = g, .root = o};
            a = o ? compile(&c2, o, ptr) : -1;
            json_decref(o);
        }
        if (a >= 0 && fmt->kind == FT_JG_CALLS_XML) a = xml_args(g, a, params, i, name, fmt);
        if (a < 0) {
            st = t_st;
            goto fail;
        }
        struct node *n = &g->nodes[call];
        int *args = realloc(n->args, (size_t)(n->n_lits + 1) * sizeof *args);
        if (!args) goto oom;
        n->args = args;
        args[n->n_lits] = a;
        if (strchr(name, '"') || strchr(name, '\\') || holds_first(g, name, strlen(name)) ||
            (fmt->kind != FT_JG_CALLS_JSON && !raw_name_ok(name, g->xs[XS_NAME_END]))) {
            st = jfail(FT_ERR_INVALID_ARG, "tools[%zu].function.name '%s' cannot be written in "
                       "the %s tool-call format (no blanks, quotes, backslashes, < or >)", i,
                       name, fmt->name);
            goto fail;
        }
        if (add_lit(g, call, name, strlen(name))) {
            st = g->nodes[call].n_lits >= MAX_SET
                     ? jfail(FT_ERR_UNSUPPORTED, "tools: at most %d functions", MAX_SET)
                     : jfail(FT_ERR_OOM, "tool grammar: out of memory");
            goto fail;
        }
    }
    if (!g->nodes[call].n_lits) {
        st = jfail(FT_ERR_INVALID_ARG, only ? "tool_choice names function '%s', which is not "
                     "in tools" : "tools: no function with a name%s", only ? only : "");
        goto fail;
    }
    if (forbid_pass(g, call)) {
        st = t_st;
        goto fail;
    }
    *out = g;
    return FT_OK;
oom:
    st = jfail(FT_ERR_OOM, "tool grammar: out of memory");
fail:
    ft_jg_free(g);
    return st;
}

void ft_jg_free(struct ft_jg *g) {
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++) {
        struct node *n = &g->nodes[i];
        for (int j = 0; j < n->n_props; j++) free(n->props[j].name);
        free(n->props);
        for (int j = 0; j < n->n_lits; j++) free(n->lits[j]);
        free(n->lits);
        free(n->lit_len);
        free(n->alts);
        free(n->args);
    }
    free(g->nodes);
    for (int i = 0; i < 4; i++) free(g->lit[i]);
    for (int i = 0; i < XS_N; i++) free(g->xs[i]);
    for (int i = 0; i < g->n_forbid; i++) free(g->forbid[i]);
    free(g->key1);
    free(g->key2);
    free(g);
}

/* ---------------------------------------------------------------- matching */

enum { ROOT = -1 };
/* phases */
enum { R_START, R_END };                                  /* value root */
enum { T_OPEN, T_TAIL };                                  /* calls root */
enum { P_START = 0 };                                     /* every value frame starts here */
enum { O_OPEN = 1, O_KEY, O_COLON, O_VAL, O_AFTER, O_COMMA };
enum { A_OPEN = 1, A_AFTER, A_COMMA };
enum { S_IN = 1, S_ESC, S_U };
enum { N_MINUS = 1, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP, N_EXP2 };
enum { L_IN = 1 };
enum { C_K1 = 1, C_COLON1, C_NAME0, C_NAME, C_COMMA, C_K2, C_COLON2, C_ARGS, C_END };
enum { X_NAME = 0, X_NEND, X_ARGS, X_END, X_NEXT, X_PNAME, X_PNEND, X_VAL, X_VEND, X_PEND };
enum { W_IN = 1 };

enum res { ACCEPT, REJECT, POP_RETRY, ACCEPT_POP };

static int is_ws(unsigned char b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

static enum res ws_or_reject(struct ft_jg_frame *f, unsigned char b) {
    if (!is_ws(b) || f->ws >= FT_JG_MAX_WS) return REJECT;
    f->ws++;
    return ACCEPT;
}

static void frame_init(struct ft_jg_frame *f, int node) {
    memset(f, 0, sizeof *f);
    f->node = node;
    f->sel = -1;
}

static enum res feed_top(const struct ft_jg *g, struct ft_jg_state *st, unsigned char b);

/* Opens a child value of node in the state and gives it b. */
static enum res push_value(const struct ft_jg *g, struct ft_jg_state *st, int node,
                           unsigned char b) {
    if (st->depth >= FT_JG_MAX_DEPTH + 2) return REJECT;
    frame_init(&st->f[st->depth++], node);
    enum res r = feed_top(g, st, b);
    return r == POP_RETRY ? REJECT : r; /* a fresh value cannot end before its first byte */
}

/* Narrows the literal candidates by b at pos: the new mask. */
static uint64_t narrow(char *const *lits, const size_t *len, uint64_t alive, uint32_t pos,
                       unsigned char b) {
    uint64_t out = 0;
    for (uint64_t m = alive; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (pos < len[i] && (unsigned char)lits[i][pos] == b) out |= 1ull << i;
    }
    return out;
}

static int some_complete(const size_t *len, uint64_t alive, uint32_t pos) {
    for (uint64_t m = alive; m; m &= m - 1)
        if (len[__builtin_ctzll(m)] == pos) return 1;
    return 0;
}

static int some_longer(const size_t *len, uint64_t alive, uint32_t pos) {
    for (uint64_t m = alive; m; m &= m - 1)
        if (len[__builtin_ctzll(m)] > pos) return 1;
    return 0;
}

static uint64_t all_mask(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* KMP step: the length of the longest prefix of p[0..len) that ends the text, given that the
 * text so far ended with p[0..m) (m < len) and then b came. */
static uint8_t kmp_next(const char *p, size_t len, uint8_t m, unsigned char b) {
    if (m < len && (unsigned char)p[m] == b) return (uint8_t)(m + 1);
    for (size_t k = m; k > 0; k--)
        if ((unsigned char)p[k - 1] == b && !memcmp(p, p + m - k + 1, k - 1)) return (uint8_t)k;
    return 0;
}

/* The forbidden texts' partial matches (a byte each in *a, from slot at) moved over b; -1 when
 * one of them is complete. */
static int forbid_step(const struct ft_jg *g, uint64_t *a, int at, unsigned char b) {
    uint64_t out = *a;
    for (int i = 0; i < g->n_forbid; i++) {
        const int sh = 8 * (i + at);
        uint8_t m = kmp_next(g->forbid[i], g->forbid_len[i], (uint8_t)(out >> sh), b);
        if (m == g->forbid_len[i]) return -1;
        out = (out & ~(0xffull << sh)) | (uint64_t)m << sh;
    }
    *a = out;
    return 0;
}

/* UTF-8 inside strings and keys (RFC 3629: no overlongs, no surrogates, at most U+10FFFF):
 * count's low byte holds the continuation bytes still due, the next byte the lead byte while
 * the first continuation (the constrained one) is due. 1: take b. */
static int utf8_ok(struct ft_jg_frame *f, unsigned char b) {
    unsigned due = f->count & 0xff, lead = f->count >> 8 & 0xff;
    if ((b & 0xc0) == 0x80) {
        if (!due) return 0;
        if ((lead == 0xe0 && b < 0xa0) || (lead == 0xed && b > 0x9f) ||
            (lead == 0xf0 && b < 0x90) || (lead == 0xf4 && b > 0x8f))
            return 0;
        f->count = due - 1;
        return 1;
    }
    if (due) return 0;
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) due = 1;
    else if (b >= 0xe0 && b <= 0xef) due = 2;
    else if (b >= 0xf0 && b <= 0xf4) due = 3;
    else return 0;
    f->count = due | (uint32_t)b << 8;
    return 1;
}

static int obj_more(const struct node *n, const struct ft_jg_frame *f) {
    return (all_mask(n->n_props) & ~f->seen) || n->addl >= 0;
}

static enum res object_byte(const struct ft_jg *g, struct ft_jg_state *st, struct ft_jg_frame *f,
                            unsigned char b) {
    const struct node *n = &g->nodes[f->node];
    switch (f->phase) {
    case P_START:
        if (b != '{') return REJECT;
        f->phase = O_OPEN;
        return ACCEPT;
    case O_OPEN: case O_COMMA:
        if (b == '"' && obj_more(n, f)) {
            f->phase = O_KEY, f->pos = 0, f->ws = 0;
            f->alive = all_mask(n->n_props) & ~f->seen;
            return ACCEPT;
        }
        if (b == '}' && f->phase == O_OPEN && !(n->req & ~f->seen)) return ACCEPT_POP;
        return ws_or_reject(f, b);
    case O_KEY: {
        if (b == '"' && !f->count) {
            f->sel = -1;
            for (uint64_t m = f->alive; m; m &= m - 1) {
                int i = __builtin_ctzll(m);
                if (n->props[i].len == f->pos) f->sel = (int16_t)i;
            }
            if (f->sel < 0 && n->addl < 0) return REJECT;
            if (f->sel >= 0) f->seen |= 1ull << f->sel;
            f->phase = O_COLON, f->ws = 0;
            return ACCEPT;
        }
        if (b == '"' || b == '\\' || b < 0x20 || !utf8_ok(f, b)) return REJECT;
        uint64_t a = 0;
        for (uint64_t m = f->alive; m; m &= m - 1) {
            int i = __builtin_ctzll(m);
            if (f->pos < n->props[i].len && (unsigned char)n->props[i].name[f->pos] == b)
                a |= 1ull << i;
        }
        if (!a && (n->addl < 0 || g->first[b])) return REJECT; /* a free key: no marker byte */
        f->alive = a;
        f->pos++;
        return ACCEPT;
    }
    case O_COLON:
        if (b == ':') {
            f->phase = O_VAL, f->ws = 0;
            return ACCEPT;
        }
        return ws_or_reject(f, b);
    case O_VAL:
        if (is_ws(b)) return ws_or_reject(f, b);
        f->phase = O_AFTER, f->ws = 0;
        return push_value(g, st, f->sel >= 0 ? n->props[f->sel].node : n->addl, b);
    case O_AFTER:
        if (b == ',' && obj_more(n, f)) {
            f->phase = O_COMMA, f->ws = 0;
            return ACCEPT;
        }
        if (b == '}' && !(n->req & ~f->seen)) return ACCEPT_POP;
        return ws_or_reject(f, b);
    }
    return REJECT;
}

static enum res array_byte(const struct ft_jg *g, struct ft_jg_state *st, struct ft_jg_frame *f,
                           unsigned char b) {
    const struct node *n = &g->nodes[f->node];
    switch (f->phase) {
    case P_START:
        if (b != '[') return REJECT;
        f->phase = A_OPEN;
        return ACCEPT;
    case A_OPEN: case A_COMMA:
        if (b == ']' && f->phase == A_OPEN && n->min_items == 0) return ACCEPT_POP;
        if (is_ws(b)) return ws_or_reject(f, b);
        if (f->count >= n->max_items) return REJECT;
        f->count++;
        f->phase = A_AFTER, f->ws = 0;
        return push_value(g, st, n->items, b);
    case A_AFTER:
        if (b == ',' && f->count < n->max_items) {
            f->phase = A_COMMA, f->ws = 0;
            return ACCEPT;
        }
        if (b == ']' && f->count >= n->min_items) return ACCEPT_POP;
        return ws_or_reject(f, b);
    }
    return REJECT;
}

static int hex(unsigned char b) {
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

static enum res string_byte(const struct ft_jg *g, const struct node *n, struct ft_jg_frame *f,
                           unsigned char b) {
    if (f->phase == P_START) {
        if (b != '"') return REJECT;
        f->phase = S_IN;
        return ACCEPT;
    }
    if (f->phase == S_IN && b == '"') return f->pos >= n->min_len && !f->count ? ACCEPT_POP : REJECT;
    if (g->n_forbid && forbid_step(g, &f->alive, 0, b)) return REJECT;
    switch (f->phase) {
    case S_IN:
        if (b < 0x20) return REJECT;
        if ((b & 0xc0) == 0x80) return utf8_ok(f, b) ? ACCEPT : REJECT; /* same character */
        if (f->pos >= n->max_len || !utf8_ok(f, b)) return REJECT;
        if (b == '\\') {
            f->phase = S_ESC;
            return ACCEPT;
        }
        f->pos++;
        return ACCEPT;
    case S_ESC:
        if (b == 'u') {
            f->phase = S_U, f->count = 0;
            return ACCEPT;
        }
        if (!strchr("\"\\/bfnrt", b) || !b) return REJECT;
        f->phase = S_IN, f->pos++;
        return ACCEPT;
    case S_U: { /* no surrogate escapes (\ud800-\udfff: a lone one is JSON no parser reads, and
                 * raw UTF-8 says every character) and no \u0000 */
        if (!hex(b)) return REJECT;
        const unsigned v = b <= '9' ? (unsigned)(b - '0') : (unsigned)((b | 0x20) - 'a' + 10);
        f->seen = (f->count ? f->seen << 4 : 0) | v;
        if (f->count == 1 && f->seen >= 0xd8 && f->seen <= 0xdf) return REJECT;
        if (f->count == 3 && f->seen == 0) return REJECT; /* \u0000: parsers refuse a NUL */
        if (++f->count == 4) f->phase = S_IN, f->pos++, f->count = 0;
        return ACCEPT;
    }
    }
    return REJECT;
}

static int number_complete(const struct ft_jg_frame *f) {
    return f->phase == N_ZERO || f->phase == N_INT || f->phase == N_FRAC || f->phase == N_EXP ||
           f->phase == N_EXP2;
}

static enum res number_byte(const struct node *n, struct ft_jg_frame *f, unsigned char b) {
    int digit = b >= '0' && b <= '9', real = n->k == NK_NUMBER, next = -1;
    switch (f->phase) {
    case P_START: next = b == '-' ? N_MINUS : b == '0' ? N_ZERO : digit ? N_INT : -1; break;
    case N_MINUS: next = b == '0' ? N_ZERO : digit ? N_INT : -1; break;
    case N_ZERO: case N_INT: case N_FRAC:
        if (digit && f->phase != N_ZERO) next = f->phase;
        else if (b == '.' && real && f->phase != N_FRAC) next = N_DOT;
        else if ((b == 'e' || b == 'E') && real) next = N_E;
        break;
    case N_DOT: next = digit ? N_FRAC : -1; break;
    case N_E: next = b == '+' || b == '-' ? N_ESIGN : digit ? N_EXP : -1; break;
    case N_ESIGN: next = digit ? N_EXP : -1; break;
    case N_EXP: next = digit ? N_EXP2 : -1; break; /* two exponent digits at most: a double */
    }
    /* integer parts stay within int64 (18 digits) so every client's JSON parser reads them */
    if (next == N_INT && f->pos >= 18) next = -1;
    if (next < 0 || f->pos >= MAX_NUM) return number_complete(f) ? POP_RETRY : REJECT;
    f->phase = (uint8_t)next;
    f->pos++;
    return ACCEPT;
}

static enum res lit_byte(const struct node *n, struct ft_jg_frame *f, unsigned char b) {
    if (f->phase == P_START) f->phase = L_IN, f->alive = all_mask(n->n_lits), f->pos = 0;
    uint64_t a = narrow(n->lits, n->lit_len, f->alive, f->pos, b);
    if (!a) return some_complete(n->lit_len, f->alive, f->pos) ? POP_RETRY : REJECT;
    f->alive = a;
    f->pos++;
    return some_longer(n->lit_len, a, f->pos) ? ACCEPT : ACCEPT_POP;
}

/* Matches the fixed key literal k (with whitespace before it). */
static enum res key_byte(struct ft_jg_frame *f, const char *k, size_t len, unsigned char b,
                         int next) {
    if (f->pos == 0 && is_ws(b)) return ws_or_reject(f, b);
    if ((unsigned char)k[f->pos] != b) return REJECT;
    if (++f->pos == len) f->phase = (uint8_t)next, f->ws = 0;
    return ACCEPT;
}

static enum res call_byte(const struct ft_jg *g, struct ft_jg_state *st, struct ft_jg_frame *f,
                          unsigned char b) {
    const struct node *n = &g->nodes[f->node];
    switch (f->phase) {
    case P_START:
        if (b != '{') return REJECT;
        f->phase = C_K1, f->pos = 0;
        return ACCEPT;
    case C_K1: return key_byte(f, g->key1, g->key1_len, b, C_COLON1);
    case C_COLON1: case C_COLON2:
        if (b != ':') return ws_or_reject(f, b);
        f->phase = f->phase == C_COLON1 ? C_NAME0 : C_ARGS, f->ws = 0;
        return ACCEPT;
    case C_NAME0:
        if (b != '"') return ws_or_reject(f, b);
        f->phase = C_NAME, f->pos = 0, f->alive = all_mask(n->n_lits);
        return ACCEPT;
    case C_NAME:
        if (b == '"') {
            f->sel = -1;
            for (uint64_t m = f->alive; m; m &= m - 1)
                if (n->lit_len[__builtin_ctzll(m)] == f->pos) f->sel = (int16_t)__builtin_ctzll(m);
            if (f->sel < 0) return REJECT;
            f->phase = C_COMMA, f->ws = 0;
            return ACCEPT;
        }
        if (!(f->alive = narrow(n->lits, n->lit_len, f->alive, f->pos, b))) return REJECT;
        f->pos++;
        return ACCEPT;
    case C_COMMA:
        if (b != ',') return ws_or_reject(f, b);
        f->phase = C_K2, f->pos = 0, f->ws = 0;
        return ACCEPT;
    case C_K2: return key_byte(f, g->key2, g->key2_len, b, C_COLON2);
    case C_ARGS:
        if (is_ws(b)) return ws_or_reject(f, b);
        f->phase = C_END, f->ws = 0;
        return push_value(g, st, n->args[f->sel], b);
    case C_END:
        if (b == '}') return ACCEPT_POP;
        return ws_or_reject(f, b);
    }
    return REJECT;
}

/* One byte of the literal l[0..len) at f->pos. */
static enum res lit_at(struct ft_jg_frame *f, const char *l, size_t len, unsigned char b) {
    if (f->pos >= len || (unsigned char)l[f->pos] != b) return REJECT;
    f->pos++;
    return ACCEPT;
}

/* XML call: after the name or a parameter, another parameter (while some are left) or the
 * call's end (once the required ones are written). */
static void x_next(const struct ft_jg *g, struct ft_jg_frame *f) {
    const struct node *o = &g->nodes[g->nodes[f->node].args[f->sel]];
    f->phase = X_NEXT, f->pos = 0;
    f->alive = ((all_mask(o->n_props) & ~f->seen) ? 1u : 0u) | ((o->req & ~f->seen) ? 0u : 2u);
}

static void x_after_name(const struct ft_jg *g, struct ft_jg_frame *f) {
    if (g->kind == FT_JG_CALLS_XML) x_next(g, f);
    else f->phase = X_ARGS, f->pos = 0;
}

/* A tagged or XML call (json_grammar.h: ft_jg_calls_fmt): sel the tool, count the parameter
 * being written, seen the parameters written. */
static enum res xcall_byte(const struct ft_jg *g, struct ft_jg_state *st, struct ft_jg_frame *f,
                           unsigned char b) {
    const struct node *n = &g->nodes[f->node];
    const struct node *o = f->sel >= 0 ? &g->nodes[n->args[f->sel]] : NULL;
    switch (f->phase) {
    case X_NAME:
        if (f->pos == 0 && !f->alive) f->alive = all_mask(n->n_lits);
        if (f->pos && b == (unsigned char)g->xs[XS_NAME_END][0]) {
            f->sel = -1;
            for (uint64_t m = f->alive; m; m &= m - 1)
                if (n->lit_len[__builtin_ctzll(m)] == f->pos) f->sel = (int16_t)__builtin_ctzll(m);
            if (f->sel < 0) return REJECT;
            f->phase = X_NEND, f->pos = 1;
            if (f->pos == g->xs_len[XS_NAME_END]) x_after_name(g, f);
            return ACCEPT;
        }
        if (!(f->alive = narrow(n->lits, n->lit_len, f->alive, f->pos, b))) return REJECT;
        f->pos++;
        return ACCEPT;
    case X_NEND:
        if (lit_at(f, g->xs[XS_NAME_END], g->xs_len[XS_NAME_END], b) == REJECT) return REJECT;
        if (f->pos == g->xs_len[XS_NAME_END]) x_after_name(g, f);
        return ACCEPT;
    case X_ARGS: {
        const int a = n->args[f->sel];
        if (!g->xs_len[XS_CALL_END]) { /* the arguments end the call: they take its frame */
            frame_init(f, a);
            enum res r = feed_top(g, st, b);
            return r == POP_RETRY ? REJECT : r;
        }
        f->phase = X_END, f->pos = 0;
        return push_value(g, st, a, b);
    }
    case X_END:
        if (lit_at(f, g->xs[XS_CALL_END], g->xs_len[XS_CALL_END], b) == REJECT) return REJECT;
        return f->pos == g->xs_len[XS_CALL_END] ? ACCEPT_POP : ACCEPT;
    case X_NEXT: {
        uint64_t a = narrow(g->xs, g->xs_len, f->alive, f->pos, b);
        if (!a) return REJECT;
        f->alive = a, f->pos++;
        if ((a & 2) && f->pos == g->xs_len[XS_CALL_END]) return ACCEPT_POP;
        if ((a & 1) && f->pos == g->xs_len[XS_PARAM_OPEN])
            f->phase = X_PNAME, f->pos = 0, f->alive = all_mask(o->n_props) & ~f->seen;
        return ACCEPT;
    }
    case X_PNAME: {
        if (f->pos && b == (unsigned char)g->xs[XS_PNAME_END][0]) {
            int sel = -1;
            for (uint64_t m = f->alive; m; m &= m - 1)
                if (o->props[__builtin_ctzll(m)].len == f->pos) sel = __builtin_ctzll(m);
            if (sel < 0) return REJECT;
            f->count = (uint32_t)sel, f->seen |= 1ull << sel;
            f->phase = X_PNEND, f->pos = 1;
            if (f->pos == g->xs_len[XS_PNAME_END]) f->phase = X_VAL;
            return ACCEPT;
        }
        uint64_t a = 0;
        for (uint64_t m = f->alive; m; m &= m - 1) {
            int i = __builtin_ctzll(m);
            if (f->pos < o->props[i].len && (unsigned char)o->props[i].name[f->pos] == b)
                a |= 1ull << i;
        }
        if (!a) return REJECT;
        f->alive = a, f->pos++;
        return ACCEPT;
    }
    case X_PNEND:
        if (lit_at(f, g->xs[XS_PNAME_END], g->xs_len[XS_PNAME_END], b) == REJECT) return REJECT;
        if (f->pos == g->xs_len[XS_PNAME_END]) f->phase = X_VAL;
        return ACCEPT;
    case X_VAL: {
        const int v = o->props[f->count].node;
        f->phase = g->nodes[v].k == NK_RAW ? X_PEND : X_VEND, f->pos = 0;
        return push_value(g, st, v, b);
    }
    case X_VEND: case X_PEND: { /* the value's end (a raw value ended itself) and the param's */
        const int i = f->phase == X_VEND ? XS_VEND_PEND : XS_PARAM_END;
        if (!g->xs_len[i]) {
            x_next(g, f);
            return xcall_byte(g, st, f, b);
        }
        if (lit_at(f, g->xs[i], g->xs_len[i], b) == REJECT) return REJECT;
        if (f->pos == g->xs_len[i]) x_next(g, f);
        return ACCEPT;
    }
    }
    return REJECT;
}

/* A raw XML value: UTF-8 text without NUL and without the forbidden texts, ended by value_end
 * (which this frame takes). pos: characters (the end's included while it may be one), alive:
 * byte 0 the end's partial match, the others the forbidden texts', seen: which of the last
 * bytes were '\n'. */
static enum res raw_byte(const struct ft_jg *g, const struct node *n, struct ft_jg_frame *f,
                         unsigned char b) {
    const char *t = g->xs[XS_VALUE_END];
    const size_t tl = g->xs_len[XS_VALUE_END];
    if (!b || (g->value_no_nl && b == '\n' && f->phase == P_START) || !utf8_ok(f, b)) return REJECT;
    if ((b & 0xc0) != 0x80) f->pos++;
    f->phase = W_IN;
    f->seen = f->seen << 1 | (b == '\n');
    const uint8_t m = kmp_next(t, tl, (uint8_t)f->alive, b);
    if (m == tl) { /* the end: the characters before it are the value */
        const uint32_t chars = f->pos - (uint32_t)tl;
        if (chars < n->min_len || chars > n->max_len) return REJECT;
        if (g->value_no_nl && (f->seen >> tl & 1)) return REJECT;
        return ACCEPT_POP;
    }
    f->alive = (f->alive & ~0xffull) | m;
    if (forbid_step(g, &f->alive, 1, b)) return REJECT;
    if (f->pos - m > n->max_len) return REJECT;
    /* a full value may not end in '\n' where the parser trims one */
    if (g->value_no_nl && b == '\n' && f->pos - m >= n->max_len) return REJECT;
    return ACCEPT;
}

/* calls root: literals 0 open, 1 sep, 2 close, 3 close_alt */
static uint64_t tail_mask(const struct ft_jg *g) {
    uint64_t m = 0;
    for (int i = 1; i < 4; i++)
        if (g->lit[i]) m |= 1ull << i;
    return m;
}

static void push_call(const struct ft_jg *g, struct ft_jg_state *st) {
    struct ft_jg_frame *r = &st->f[0];
    r->phase = T_TAIL, r->pos = 0, r->alive = tail_mask(g);
    frame_init(&st->f[st->depth++], g->root);
}

static enum res root_byte(const struct ft_jg *g, struct ft_jg_state *st, struct ft_jg_frame *f,
                          unsigned char b) {
    if (!g->calls) {
        if (f->phase == R_START && !is_ws(b)) {
            f->phase = R_END, f->ws = 0;
            return push_value(g, st, g->root, b);
        }
        return ws_or_reject(f, b);
    }
    if (f->phase == T_OPEN) {
        if (f->pos >= g->lit_len[0] || (unsigned char)g->lit[0][f->pos] != b) return REJECT;
        if (++f->pos == g->lit_len[0]) push_call(g, st);
        return ACCEPT;
    }
    uint64_t a = narrow(g->lit, g->lit_len, f->alive, f->pos, b);
    if (!a) return REJECT;
    f->alive = a;
    f->pos++;
    if ((a & 2) && g->lit_len[1] == f->pos) push_call(g, st); /* sep: the next call */
    return ACCEPT;
}

static enum res feed_top(const struct ft_jg *g, struct ft_jg_state *st, unsigned char b) {
    struct ft_jg_frame *f = &st->f[st->depth - 1];
    if (f->node == ROOT) return root_byte(g, st, f, b);
    const struct node *n = &g->nodes[f->node];
    if (n->k == NK_UNION) { /* resolve by the first byte */
        for (int i = 0; i < n->n_alts; i++) {
            uint8_t set[256] = {0};
            first_set(g, n->alts[i], set, 0);
            if (set[b]) {
                frame_init(f, n->alts[i]);
                return feed_top(g, st, b);
            }
        }
        return REJECT;
    }
    switch (n->k) {
    case NK_OBJECT: return object_byte(g, st, f, b);
    case NK_ARRAY: return array_byte(g, st, f, b);
    case NK_STRING: return string_byte(g, n, f, b);
    case NK_XCALL: return xcall_byte(g, st, f, b);
    case NK_RAW: return raw_byte(g, n, f, b);
    case NK_NUMBER: case NK_INTEGER: return number_byte(n, f, b);
    case NK_LIT: return lit_byte(n, f, b);
    case NK_CALL: return call_byte(g, st, f, b);
    case NK_UNION: break;
    }
    return REJECT;
}

/* One byte through the stack: frames that end without consuming it pass it down. */
static int feed_byte(const struct ft_jg *g, struct ft_jg_state *st, unsigned char b) {
    for (;;) {
        int d = st->depth;
        enum res r = feed_top(g, st, b);
        if (r == REJECT) return -1;
        if (r == ACCEPT) return 0;
        /* the frame that answered is st->f[d-1] (a push above it answered for itself) */
        if (st->depth != d) return r == ACCEPT_POP ? (st->depth--, 0) : -1;
        st->depth--;
        if (st->depth <= 0) return -1;
        if (r == ACCEPT_POP) return 0;
        /* POP_RETRY: the frame below gets b */
    }
}

void ft_jg_start(const struct ft_jg *g, struct ft_jg_state *st) {
    st->depth = 1;
    st->dead = 0;
    frame_init(&st->f[0], ROOT);
    if (g->calls && g->lit_len[0] == 0) push_call(g, st);
}

int ft_jg_feed(const struct ft_jg *g, struct ft_jg_state *st, const char *s, size_t n) {
    if (st->dead) return -1;
    for (size_t i = 0; i < n; i++)
        if (feed_byte(g, st, (unsigned char)s[i])) {
            st->dead = 1;
            return -1;
        }
    return 0;
}

/* 1 when frame f can end without another byte. */
static int frame_can_end(const struct ft_jg *g, const struct ft_jg_frame *f) {
    const struct node *n = &g->nodes[f->node];
    if (n->k == NK_NUMBER || n->k == NK_INTEGER) return number_complete(f);
    if (n->k == NK_LIT) return f->phase == L_IN && some_complete(n->lit_len, f->alive, f->pos);
    return 0;
}

int ft_jg_accepting(const struct ft_jg *g, const struct ft_jg_state *st) {
    if (st->dead || st->depth < 1) return 0;
    for (int i = st->depth - 1; i >= 1; i--)
        if (!frame_can_end(g, &st->f[i])) return 0;
    const struct ft_jg_frame *r = &st->f[0];
    if (!g->calls) return r->phase == R_END;
    if (r->phase != T_TAIL) return 0;
    if (st->depth > 1) return 0; /* a call still open */
    for (int i = 2; i < 4; i++)
        if ((r->alive >> i & 1) && g->lit_len[i] == r->pos) return 1;
    return 0;
}

int ft_jg_match(const struct ft_jg *g, const char *s, size_t n) {
    struct ft_jg_state st;
    ft_jg_start(g, &st);
    return ft_jg_feed(g, &st, s, n) == 0 && ft_jg_accepting(g, &st);
}

/* ---------------------------------------------------------------- tokens */

/* The mask walk. Feeding every token's bytes from the state, one token at a time, is exact but
 * costs ~151k state copies and ~1M byte feeds a mask on Qwen3's vocabulary. The vocabulary's
 * tables (struct ft_jg_vtab, built once by ft_jg_vocab_init) make the same answer cheap:
 *   - a byte trie of the token strings (preorder, each node's subtree end), walked with one
 *     working state whose changes are undone byte by byte (only the frames a byte touches are
 *     saved), so a shared prefix is fed once and a refused byte skips every token below it;
 *   - string content: inside a JSON string or an object key any name may take, "string-class"
 *     tokens (bytes >= 0x20 but '"' and '\\', UTF-8 valid from a character boundary, a last
 *     character possibly incomplete), inside a raw XML value (or where one begins) "raw-class"
 *     tokens (no NUL, no '\n', the same UTF-8) all fit exactly when their characters fit the
 *     maxLength left (none mid-character), unless one holds a first byte of the grammar's
 *     forbidden texts or raw value end (or begins with a byte a pending partial match
 *     continues): those, and the tokens outside the class (a trie of their own), are walked;
 *     the rest come from precomputed bitmasks (the class's tokens of at most c characters).
 * ft_jg_allow_ref keeps the per-token walk: the tests and bench/bench_grammar.c hold the two
 * equal. */
#define TRIE_MAX 255 /* longer tokens are not in the tries: fed one by one */
#define CUM_N 32     /* bitmasks of a class's tokens of at most c < CUM_N characters */

struct trie {
    int n;               /* nodes, in preorder; node i's subtree is [i, end[i]) */
    uint8_t *byte, *depth; /* the node's byte and its depth (1 = a first byte) */
    int32_t *end;
    int32_t *tok;        /* [n + 1]: node i's own tokens are ids[tok[i] .. tok[i + 1]), its
                            subtree's ids[tok[i] .. tok[end[i]]) */
    int32_t *ids;
};

/* A class of tokens that fit string content exactly by their characters. */
struct cls {
    uint32_t *all;           /* [nw] the class's tokens */
    uint32_t *cum;           /* [CUM_N][nw] those of at most c characters */
    int32_t *wide;           /* ids of >= CUM_N characters, fewest first */
    uint8_t *wide_chars;
    int n_wide, max_chars;
    struct trie rest;        /* the tokens outside the class */
};
enum { CLS_STR, CLS_RAW };

struct ft_jg_vtab {
    struct trie all;         /* every token (<= TRIE_MAX bytes) */
    int32_t root[256];       /* all's node of each first byte, -1 none */
    struct cls cls[2];       /* string-class, raw-class */
    int32_t post_off[257];   /* raw-class ids holding byte b (ASCII but letters and digits) */
    int32_t *post;
    uint8_t has_post[256];   /* 1: post lists every raw-class token holding b */
    int32_t *longs;          /* tokens over TRIE_MAX bytes */
    int n_longs;
};

struct ent {
    const char *s;
    uint32_t len;
    int32_t id;
};

static int ent_cmp(const void *a, const void *b) {
    const struct ent *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static uint32_t lcp(const struct ent *a, const struct ent *b) {
    uint32_t k = 0;
    const uint32_t n = a->len < b->len ? a->len : b->len;
    while (k < n && a->s[k] == b->s[k]) k++;
    return k;
}

static void trie_free(struct trie *t) {
    free(t->byte), free(t->depth), free(t->end), free(t->tok), free(t->ids);
    memset(t, 0, sizeof *t);
}

/* The trie of the sorted entries e[0..n) with pick[i] (NULL: all). */
static int trie_build(struct trie *t, const struct ent *e, int n, const uint8_t *pick) {
    memset(t, 0, sizeof *t);
    size_t nodes = 0, n_ids = 0;
    const struct ent *prev = NULL;
    for (int i = 0; i < n; i++) {
        if (pick && !pick[i]) continue;
        nodes += e[i].len - (prev ? lcp(prev, &e[i]) : 0);
        n_ids++, prev = &e[i];
    }
    t->byte = malloc(nodes + 1), t->depth = malloc(nodes + 1);
    t->end = malloc((nodes + 1) * sizeof *t->end);
    t->tok = malloc((nodes + 1) * sizeof *t->tok);
    t->ids = malloc((n_ids + 1) * sizeof *t->ids);
    if (!t->byte || !t->depth || !t->end || !t->tok || !t->ids) {
        trie_free(t);
        return -1;
    }
    int32_t stack[TRIE_MAX + 1];
    int sd = 0, nn = 0, ni = 0;
    prev = NULL;
    for (int i = 0; i < n; i++) {
        if (pick && !pick[i]) continue;
        const uint32_t l = prev ? lcp(prev, &e[i]) : 0;
        while ((uint32_t)sd > l) t->end[stack[--sd]] = nn;
        for (uint32_t k = l; k < e[i].len; k++) {
            t->byte[nn] = (uint8_t)e[i].s[k];
            t->depth[nn] = (uint8_t)(k + 1);
            t->tok[nn] = ni;
            stack[sd++] = nn++;
        }
        t->ids[ni++] = e[i].id;
        prev = &e[i];
    }
    while (sd) t->end[stack[--sd]] = nn;
    t->tok[nn] = ni;
    t->n = nn;
    return 0;
}

static void vtab_free(struct ft_jg_vtab *t) {
    if (!t) return;
    trie_free(&t->all);
    for (int k = 0; k < 2; k++) {
        struct cls *c = &t->cls[k];
        free(c->all), free(c->cum), free(c->wide), free(c->wide_chars);
        trie_free(&c->rest);
    }
    free(t->post), free(t->longs);
    free(t);
}

/* The classes (see above) s[0..n) is in (bit CLS_STR, bit CLS_RAW) and its characters. */
static int token_class(const char *s, size_t n, int *chars) {
    struct ft_jg_frame f = {0};
    int c = 0, in = 1 << CLS_STR | 1 << CLS_RAW;
    if (n > TRIE_MAX) return 0;
    for (size_t i = 0; i < n && in; i++) {
        const unsigned char b = (unsigned char)s[i];
        if (!utf8_ok(&f, b)) return 0;
        if (b < 0x20 || b == '"' || b == '\\') in &= ~(1 << CLS_STR);
        if (!b || b == '\n') in &= ~(1 << CLS_RAW);
        c += (b & 0xc0) != 0x80;
    }
    *chars = c;
    return in;
}

/* Bytes with lists of the raw-class tokens holding them: ASCII but letters and digits. */
static int post_byte(int b) {
    return b > 0 && b < 0x80 && b != '\n' && !(b >= '0' && b <= '9') &&
           !((b | 0x20) >= 'a' && (b | 0x20) <= 'z');
}

/* Class k's tables from the characters of its tokens (chars[id]: 0 = not in it). */
static int cls_build(struct cls *c, const uint8_t *chars, int V, const struct ent *e, int n,
                     uint8_t *pick) {
    const int nw = (V + 31) / 32;
    c->all = calloc((size_t)nw + 1, 4);
    c->cum = calloc((size_t)CUM_N * nw + 1, 4);
    if (!c->all || !c->cum) return -1;
    int32_t at[257] = {0};
    for (int32_t id = 0; id < V; id++) {
        const int k = chars[id];
        if (!k) continue;
        c->all[id >> 5] |= 1u << (id & 31);
        for (int j = k; j < CUM_N; j++) c->cum[(size_t)j * nw + (id >> 5)] |= 1u << (id & 31);
        if (k >= CUM_N) at[k + 1]++, c->n_wide++;
        if (k > c->max_chars) c->max_chars = k;
    }
    /* wide: a counting sort by characters */
    c->wide = malloc(((size_t)c->n_wide + 1) * sizeof *c->wide);
    c->wide_chars = malloc((size_t)c->n_wide + 1);
    if (!c->wide || !c->wide_chars) return -1;
    for (int k = 1; k < 257; k++) at[k] += at[k - 1];
    for (int32_t id = 0; id < V; id++)
        if (chars[id] >= CUM_N) c->wide_chars[at[chars[id]]] = chars[id], c->wide[at[chars[id]]++] = id;
    for (int i = 0; i < n; i++) pick[i] = !chars[e[i].id];
    return trie_build(&c->rest, e, n, pick);
}

static struct ft_jg_vtab *vtab_build(const struct ft_jg_vocab *v) {
    const int V = v->n_vocab;
    struct ft_jg_vtab *t = calloc(1, sizeof *t);
    struct ent *e = malloc(((size_t)V + 1) * sizeof *e);
    uint8_t *chars = calloc(2 * (size_t)V + 1, 1), *pick = malloc((size_t)V + 1);
    if (!t || !e || !chars || !pick) goto fail;
    t->longs = malloc(((size_t)V + 1) * sizeof *t->longs);
    if (!t->longs) goto fail;
    int n = 0;
    size_t n_post = 0;
    for (int pass = 0; pass < 2; pass++) { /* the posting lists: counted, then filled */
        int32_t fill[256];
        memcpy(fill, t->post_off, sizeof fill);
        for (int32_t id = 0; id < V; id++) {
            if (!v->bytes[id]) continue;
            if (pass == 0 && v->len[id] > TRIE_MAX) {
                t->longs[t->n_longs++] = id;
                continue;
            }
            int c = 0, in = 0;
            if (pass == 0) {
                e[n++] = (struct ent){v->bytes[id], v->len[id], id};
                in = token_class(v->bytes[id], v->len[id], &c);
                /* c >= 1: a first byte is never a continuation */
                if (in >> CLS_STR & 1) chars[id] = (uint8_t)c;
                if (in >> CLS_RAW & 1) chars[V + id] = (uint8_t)c;
            }
            if (!chars[V + id]) continue;
            uint8_t seen[256] = {0};
            for (uint32_t i = 0; i < v->len[id]; i++) {
                const unsigned char b = (unsigned char)v->bytes[id][i];
                if (!post_byte(b) || seen[b]) continue;
                seen[b] = 1;
                if (pass == 0) t->post_off[b + 1]++, n_post++;
                else t->post[fill[b]++] = id;
            }
        }
        if (pass == 0) {
            for (int b = 0; b < 256; b++) t->post_off[b + 1] += t->post_off[b];
            if (!(t->post = malloc((n_post + 1) * sizeof *t->post))) goto fail;
        }
    }
    for (int b = 0; b < 256; b++) /* no raw-class token holds NUL or '\n' */
        t->has_post[b] = (uint8_t)(post_byte(b) || b == 0 || b == '\n');
    qsort(e, (size_t)n, sizeof *e, ent_cmp);
    if (trie_build(&t->all, e, n, NULL)) goto fail;
    for (int b = 0; b < 256; b++) t->root[b] = -1;
    for (int i = 0; i < t->all.n; i = t->all.end[i]) t->root[t->all.byte[i]] = i;
    if (cls_build(&t->cls[CLS_STR], chars, V, e, n, pick) ||
        cls_build(&t->cls[CLS_RAW], chars + V, V, e, n, pick))
        goto fail;
    free(e), free(chars), free(pick);
    return t;
fail:
    free(e), free(chars), free(pick);
    vtab_free(t);
    return NULL;
}

enum ft_status ft_jg_vocab_init(struct ft_jg_vocab *v, int n_vocab,
                                const char *(*bytes_of)(void *ctx, int32_t id, size_t *len,
                                                        int *special),
                                void *ctx) {
    memset(v, 0, sizeof *v);
    const char **b = calloc((size_t)n_vocab, sizeof *b);
    uint32_t *len = calloc((size_t)n_vocab, sizeof *len);
    uint8_t *plain = calloc((size_t)n_vocab, 1);
    if (!b || !len || !plain) {
        free(b), free(len), free(plain);
        return ft_fail(FT_ERR_OOM, "grammar vocabulary: out of memory");
    }
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t n = 0;
        int special = 0;
        const char *s = bytes_of(ctx, id, &n, &special);
        if (!s || !n || special) continue;
        b[id] = s;
        len[id] = (uint32_t)n;
        /* plain: whole UTF-8 characters, none of them '"', '\\' or a control character */
        struct ft_jg_frame f = {0};
        int p = 1;
        for (size_t i = 0; i < n && p; i++) {
            unsigned char c = (unsigned char)s[i];
            p = c >= 0x20 && c != '"' && c != '\\' && utf8_ok(&f, c);
        }
        plain[id] = (uint8_t)(p && !f.count);
    }
    v->n_vocab = n_vocab, v->bytes = b, v->len = len, v->plain = plain;
    if (!(v->tab = vtab_build(v))) {
        ft_jg_vocab_free(v);
        return ft_fail(FT_ERR_OOM, "grammar vocabulary: out of memory (token trie)");
    }
    return FT_OK;
}

void ft_jg_vocab_free(struct ft_jg_vocab *v) {
    free((void *)v->bytes);
    free((void *)v->len);
    free((void *)v->plain);
    vtab_free((struct ft_jg_vtab *)v->tab);
    memset(v, 0, sizeof *v);
}

static int token_ok(const struct ft_jg *g, const struct ft_jg_state *st,
                    const struct ft_jg_vocab *v, int32_t id, const uint8_t *ok1, int fast) {
    const char *s = v->bytes[id];
    if (!s) return 0;
    if (ok1 && !ok1[(unsigned char)s[0]]) return 0;
    if (fast && v->plain[id] && !holds_first(g, s, v->len[id])) return 1;
    struct ft_jg_state t;
    t.depth = st->depth, t.dead = 0;
    memcpy(t.f, st->f, (size_t)st->depth * sizeof t.f[0]);
    return ft_jg_feed(g, &t, s, v->len[id]) == 0;
}

int ft_jg_token_ok(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                   int32_t id) {
    if (id < 0 || id >= v->n_vocab || st->dead) return 0;
    return token_ok(g, st, v, id, NULL, 0);
}

/* --- the reference walk: every token fed from the state --- */

/* 1 when the top frame is inside a string of unbounded length: plain bytes all fit. */
static int in_free_string(const struct ft_jg *g, const struct ft_jg_state *st) {
    const struct ft_jg_frame *f = &st->f[st->depth - 1];
    if (f->node == ROOT || f->count || f->alive) return 0; /* mid-character, mid-marker */
    const struct node *n = &g->nodes[f->node];
    if (n->k == NK_RAW) return n->max_len == NO_LIMIT; /* plain tokens hold no '\n' */
    return n->k == NK_STRING && f->phase == S_IN && n->max_len == NO_LIMIT;
}

/* Which first bytes fit at all (ok1), and whether plain tokens fit whole without a feed (fast). */
struct walk {
    uint8_t ok1[256];
    int fast;
};

static void walk_init(const struct ft_jg *g, const struct ft_jg_state *st, struct walk *w) {
    for (int c = 0; c < 256; c++) {
        struct ft_jg_state t;
        t.depth = st->depth, t.dead = st->dead;
        memcpy(t.f, st->f, (size_t)st->depth * sizeof t.f[0]);
        char ch = (char)c;
        w->ok1[c] = ft_jg_feed(g, &t, &ch, 1) == 0;
    }
    w->fast = in_free_string(g, st);
}

/* Bits of the tokens base .. base+31 (below n_vocab) that fit in st; end ids as any token. */
static uint32_t walk_word(const struct ft_jg *g, const struct ft_jg_state *st,
                          const struct ft_jg_vocab *v, const struct walk *w, int32_t base) {
    const int32_t n = v->n_vocab - base < 32 ? v->n_vocab - base : 32;
    uint32_t bits = 0;
    for (int32_t j = 0; j < n; j++)
        if (token_ok(g, st, v, base + j, w->ok1, w->fast)) bits |= 1u << j;
    return bits;
}

static void ref_words(const struct ft_jg *g, const struct ft_jg_state *st,
                      const struct ft_jg_vocab *v, uint32_t *words) {
    const int nw = (v->n_vocab + 31) / 32;
    struct walk w;
    walk_init(g, st, &w);
    for (int i = 0; i < nw; i++) words[i] = walk_word(g, st, v, &w, 32 * i);
}

/* --- the trie walk --- */

/* The working state and, per byte fed (a level), the frames that byte may have changed. */
struct wk {
    const struct ft_jg *g;
    struct ft_jg_state s;
    struct lv { int depth, lo, base; } lv[TRIE_MAX + 2];
    int level;
    struct ft_jg_frame *buf; /* saved frames, each level's from frame depth-1 down to lo */
    int n, cap, oom;
    struct ft_jg_frame sbuf[256];
};

static void wk_init(struct wk *w, const struct ft_jg *g, const struct ft_jg_state *st) {
    w->g = g;
    w->s.depth = st->depth, w->s.dead = 0;
    memcpy(w->s.f, st->f, (size_t)st->depth * sizeof st->f[0]);
    w->level = 0, w->buf = w->sbuf, w->n = 0, w->cap = 256, w->oom = 0;
}

static void wk_done(struct wk *w) {
    if (w->buf != w->sbuf) free(w->buf);
}

static int wk_save(struct wk *w, const struct ft_jg_frame *f) {
    if (w->n == w->cap) {
        struct ft_jg_frame *p = w->buf == w->sbuf ? malloc(2 * (size_t)w->cap * sizeof *p)
                                                   : realloc(w->buf, 2 * (size_t)w->cap * sizeof *p);
        if (!p) return w->oom = 1, -1;
        if (w->buf == w->sbuf) memcpy(p, w->sbuf, sizeof w->sbuf);
        w->buf = p, w->cap *= 2;
    }
    w->buf[w->n++] = *f;
    return 0;
}

/* feed_byte on the working state, as a new level: a call of feed_top at depth d changes only
 * frames d-1 and above (frames above the level's starting depth are scratch), so frame d-1 is
 * saved before each. 0: accepted; -1: refused (the level stays, for wk_undo). */
static int wk_feed(struct wk *w, unsigned char b) {
    struct ft_jg_state *st = &w->s;
    struct lv *l = &w->lv[++w->level];
    l->depth = l->lo = st->depth, l->base = w->n;
    for (;;) {
        const int d = st->depth;
        if (d - 1 < l->lo) {
            if (wk_save(w, &st->f[d - 1])) return -1;
            l->lo = d - 1;
        }
        enum res r = feed_top(w->g, st, b);
        if (r == REJECT) return -1;
        if (r == ACCEPT) return 0;
        if (st->depth != d) return r == ACCEPT_POP ? (st->depth--, 0) : -1;
        st->depth--;
        if (st->depth <= 0) return -1;
        if (r == ACCEPT_POP) return 0;
    }
}

static void wk_undo(struct wk *w) {
    const struct lv *l = &w->lv[w->level--];
    for (int i = l->depth - 1, k = l->base; i >= l->lo; i--, k++) w->s.f[i] = w->buf[k];
    w->s.depth = l->depth;
    w->n = l->base;
}

static inline void set_bit(uint32_t *words, int32_t id) { words[id >> 5] |= 1u << (id & 31); }
static inline void clear_bit(uint32_t *words, int32_t id) { words[id >> 5] &= ~(1u << (id & 31)); }

/* The tokens of t's nodes [lo, hi) (whole subtrees of first bytes) that fit, from the working
 * state at level 0: their bits set. -1: out of memory. */
static int trie_walk(struct wk *w, const struct trie *t, int lo, int hi, uint32_t *words) {
    for (int i = lo; i < hi;) {
        const int d = t->depth[i];
        while (w->level >= d) wk_undo(w);
        if (wk_feed(w, t->byte[i]) == 0) {
            for (int32_t k = t->tok[i]; k < t->tok[i + 1]; k++) set_bit(words, t->ids[k]);
            i++;
        } else {
            wk_undo(w);
            if (w->oom) return -1;
            i = t->end[i];
        }
    }
    while (w->level > 0) wk_undo(w);
    return 0;
}

/* The state's string content, when its top frame is inside one (see above): a JSON string, an
 * object key any name may take (the string class), a raw XML value or an XML parameter's raw
 * value about to begin (the raw class). *budget: the characters left (-1 none fit, INT64_MAX
 * no limit); x[b]: a pending partial match of a forbidden text (or of the raw value's end)
 * continues with b. 1 + the class, 0: not content. */
static int content_state(const struct ft_jg *g, const struct ft_jg_state *st, int64_t *budget,
                         int *mid, uint8_t x[256]) {
    const struct ft_jg_frame *f = &st->f[st->depth - 1];
    if (f->node == ROOT) return 0;
    const struct node *n = &g->nodes[f->node];
    int at = 0, cls = CLS_STR; /* at: slot of the first forbidden text in f->alive */
    if (n->k == NK_STRING && f->phase == S_IN) {
        at = 0;
    } else if (n->k == NK_RAW) {
        at = 1, cls = CLS_RAW;
        const uint8_t m = (uint8_t)f->alive;
        for (int b = 0; m && b < 256; b++)
            x[b] |= kmp_next(g->xs[XS_VALUE_END], g->xs_len[XS_VALUE_END], m, (unsigned char)b) != 0;
    } else if (n->k == NK_OBJECT && f->phase == O_KEY && n->addl >= 0) {
        *budget = INT64_MAX, *mid = f->count != 0; /* alive: the names still matched */
        return 1 + CLS_STR;
    } else if (n->k == NK_XCALL && f->phase == X_VAL) { /* the first byte pushes the value */
        const struct node *val = &g->nodes[g->nodes[n->args[f->sel]].props[f->count].node];
        if (val->k != NK_RAW) return 0;
        *mid = 0;
        *budget = val->max_len == NO_LIMIT ? INT64_MAX : (int64_t)val->max_len;
        return 1 + CLS_RAW;
    } else {
        return 0;
    }
    *mid = f->count != 0;
    *budget = n->max_len == NO_LIMIT ? INT64_MAX : (int64_t)n->max_len - (int64_t)f->pos;
    for (int i = 0; i < g->n_forbid; i++) {
        const uint8_t m = (uint8_t)(f->alive >> (8 * (i + at)));
        for (int b = 0; m && b < 256; b++)
            x[b] |= kmp_next(g->forbid[i], g->forbid_len[i], m, (unsigned char)b) != 0;
    }
    return 1 + cls;
}

/* The class's tokens of at most budget characters. */
static void fast_words(const struct cls *t, int nw, int64_t budget, uint32_t *words) {
    if (budget < 0) {
        memset(words, 0, (size_t)nw * sizeof *words);
    } else if (budget >= t->max_chars) {
        memcpy(words, t->all, (size_t)nw * sizeof *words);
    } else if (budget < CUM_N) {
        memcpy(words, t->cum + (size_t)budget * nw, (size_t)nw * sizeof *words);
    } else {
        memcpy(words, t->all, (size_t)nw * sizeof *words);
        for (int i = t->n_wide - 1; i >= 0 && t->wide_chars[i] > budget; i--)
            clear_bit(words, t->wide[i]);
    }
}

/* ft_jg_allow's bits but the end rule (st not dead), by the trie walk; -1: no tables or out of
 * memory (words then undefined). */
static int fast_allow(const struct ft_jg *g, const struct ft_jg_state *st,
                      const struct ft_jg_vocab *v, uint32_t *words) {
    const struct ft_jg_vtab *t = v->tab;
    const int nw = (v->n_vocab + 31) / 32;
    if (!t) return -1;
    struct wk *w = malloc(sizeof *w);
    if (!w) return -1;
    wk_init(w, g, st);
    int64_t budget = 0;
    int mid = 0, rc = 0;
    uint8_t x[256] = {0};
    int fast = content_state(g, st, &budget, &mid, x);
    for (int b = 0; fast && !mid && g->any_first && b < 256; b++)
        if (g->first[b] && !t->has_post[b]) fast = 0; /* no list of the tokens holding it */
    const struct cls *c = fast ? &t->cls[fast - 1] : NULL;
    if (!fast) {
        memset(words, 0, (size_t)nw * sizeof *words);
        rc = trie_walk(w, &t->all, 0, t->all.n, words);
    } else if (mid) { /* no token of the class continues a character */
        memset(words, 0, (size_t)nw * sizeof *words);
        rc = trie_walk(w, &c->rest, 0, c->rest.n, words);
    } else {
        fast_words(c, nw, budget, words);
        /* the exceptions: cleared, then walked */
        for (int b = 0; g->any_first && b < 256; b++)
            for (int32_t k = g->first[b] ? t->post_off[b] : 0; g->first[b] && k < t->post_off[b + 1]; k++)
                clear_bit(words, t->post[k]);
        for (int b = 0; b < 256; b++) {
            const int r = t->root[b];
            if (!x[b] || r < 0) continue;
            for (int32_t k = t->all.tok[r]; k < t->all.tok[t->all.end[r]]; k++)
                clear_bit(words, t->all.ids[k]);
        }
        for (int b = 0; b < 256 && !rc; b++)
            if (x[b] && t->root[b] >= 0)
                rc = trie_walk(w, &t->all, t->root[b], t->all.end[t->root[b]], words);
        if (!rc) rc = trie_walk(w, &c->rest, 0, c->rest.n, words);
        for (int b = 0; g->any_first && b < 256; b++)
            for (int32_t k = g->first[b] ? t->post_off[b] : 0; g->first[b] && k < t->post_off[b + 1]; k++)
                if (token_ok(g, st, v, t->post[k], NULL, 0)) set_bit(words, t->post[k]);
    }
    for (int i = 0; i < t->n_longs; i++)
        if (token_ok(g, st, v, t->longs[i], NULL, 0)) set_bit(words, t->longs[i]);
    wk_done(w);
    free(w);
    return rc;
}

/* Whether the end ids are allowed: the match is complete, or nothing else fits (any: some
 * token fits). */
static int ends_allowed(const struct ft_jg *g, const struct ft_jg_state *st, int any) {
    return ft_jg_accepting(g, st) || !any;
}

static void allow(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                  const int32_t *end, int n_end, uint32_t *words, int ref) {
    const int nw = (v->n_vocab + 31) / 32, ne = n_end < FT_JG_MAX_END ? n_end : FT_JG_MAX_END;
    uint32_t any = 0;
    if (st->dead) memset(words, 0, (size_t)nw * sizeof *words);
    else if (ref || fast_allow(g, st, v, words)) ref_words(g, st, v, words);
    for (int i = 0; i < nw; i++) any |= words[i];
    const int on = ends_allowed(g, st, any != 0);
    for (int i = 0; i < ne; i++) {
        const int32_t id = end[i];
        if (id < 0 || id >= v->n_vocab) continue;
        if (on) words[id >> 5] |= 1u << (id & 31);
        else words[id >> 5] &= ~(1u << (id & 31));
    }
}

void ft_jg_allow(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                 const int32_t *end, int n_end, uint32_t *words) {
    allow(g, st, v, end, n_end, words, 0);
}

void ft_jg_allow_ref(const struct ft_jg *g, const struct ft_jg_state *st,
                     const struct ft_jg_vocab *v, const int32_t *end, int n_end, uint32_t *words) {
    allow(g, st, v, end, n_end, words, 1);
}

static const uint32_t k_lane[32] = {
    1u << 0, 1u << 1, 1u << 2, 1u << 3, 1u << 4, 1u << 5, 1u << 6, 1u << 7, 1u << 8, 1u << 9,
    1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15, 1u << 16, 1u << 17, 1u << 18,
    1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23, 1u << 24, 1u << 25, 1u << 26, 1u << 27,
    1u << 28, 1u << 29, 1u << 30, 1u << 31};

void ft_jg_mask(const struct ft_jg *g, const struct ft_jg_state *st, const struct ft_jg_vocab *v,
                const int32_t *end, int n_end, float *logits) {
    const int nw = (v->n_vocab + 31) / 32;
    uint32_t *words = malloc(((size_t)nw + 1) * sizeof *words);
    if (words) { /* ft_jg_allow's bits: every token it leaves out to -inf, the others kept */
        ft_jg_allow(g, st, v, end, n_end, words);
        for (int i = 0; i < nw; i++) {
            const uint32_t bits = words[i];
            if (bits == ~0u) continue;
            float *l = logits + 32 * i;
            const int32_t n = v->n_vocab - 32 * i < 32 ? v->n_vocab - 32 * i : 32;
            if (n == 32 && !bits)
                for (int j = 0; j < 32; j++) l[j] = -INFINITY;
            else if (n == 32) /* branch-free, on the bits: a vector select */
                for (int j = 0; j < 32; j++) {
                    uint32_t u, m = (bits & k_lane[j]) ? ~0u : 0u;
                    memcpy(&u, &l[j], 4);
                    u = (u & m) | (0xff800000u & ~m); /* -inf */
                    memcpy(&l[j], &u, 4);
                }
            else
                for (int32_t j = 0; j < n; j++)
                    if (!(bits >> j & 1)) l[j] = -INFINITY;
        }
        free(words);
        return;
    }
    /* out of memory: the reference walk, a word at a time */
    const int ne = n_end < FT_JG_MAX_END ? n_end : FT_JG_MAX_END;
    float saved[FT_JG_MAX_END];
    for (int i = 0; i < ne; i++) saved[i] = end[i] >= 0 && end[i] < v->n_vocab ? logits[end[i]] : 0;
    struct walk w;
    if (!st->dead) walk_init(g, st, &w);
    uint32_t any = 0;
    for (int32_t base = 0; base < v->n_vocab; base += 32) {
        const uint32_t bits = st->dead ? 0 : walk_word(g, st, v, &w, base);
        any |= bits;
        if (bits == ~0u) continue;
        const int32_t n = v->n_vocab - base < 32 ? v->n_vocab - base : 32;
        for (int32_t j = 0; j < n; j++)
            if (!(bits >> j & 1)) logits[base + j] = -INFINITY;
    }
    const int on = ends_allowed(g, st, any != 0);
    for (int i = 0; i < ne; i++)
        if (end[i] >= 0 && end[i] < v->n_vocab) logits[end[i]] = on ? saved[i] : -INFINITY;
}
