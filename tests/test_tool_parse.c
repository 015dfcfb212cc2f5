/* test_tool_parse.c — tool-call parsers (text/tool_parse.h): each family's output format into
 * (content, calls), the same when the text arrives one byte at a time, typed XML parameters,
 * blocks that do not parse given back as content, the calls shown live (their arguments'
 * pieces add up to the final ones; the XML families, deepseek, kimi and harmony for every cut
 * of the text into pushes), a failed block's shown calls keeping their indices, format names and
 * detection. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "test.h"
#include "text/chat.h"
#include "text/tool_parse.h"

#define DS_BAR "\xef\xbd\x9c"
#define DS_SEP "\xe2\x96\x81"
/* Kimi-K2's markers */
#define KS_B "<|tool_calls_section_begin|>"
#define KS_E "<|tool_calls_section_end|>"
#define KC_B "<|tool_call_begin|>"
#define KC_A "<|tool_call_argument_begin|>"
#define KC_E "<|tool_call_end|>"

static const char *k_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"hot\":{\"type\":\"boolean\"}}}}}]";

struct result {
    char content[2048];
    int n_calls;
    char names[4][64], args[4][256];
};

/* Runs text through a parser in pieces of `step` bytes (0: all at once). */
static void run(enum ft_tool_fmt fmt, const char *text, size_t step, struct result *r) {
    json_t *tools = json_loads(k_tools, 0, NULL);
    struct ft_tool_parser p;
    ft_tool_parser_init(&p, fmt, tools);
    memset(r, 0, sizeof *r);
    size_t n = strlen(text), off = 0, used = 0;
    while (off < n) {
        size_t k = step && step < n - off ? step : n - off;
        ft_tool_parser_push(&p, text + off, k);
        off += k;
        if (p.n_out) memcpy(r->content + used, p.out, p.n_out);
        used += p.n_out;
        p.n_out = 0;
    }
    ft_tool_parser_finish(&p);
    if (p.n_out) memcpy(r->content + used, p.out, p.n_out);
    used += p.n_out;
    r->content[used] = 0;
    r->n_calls = p.n_calls;
    for (int i = 0; i < p.n_calls && i < 4; i++) {
        snprintf(r->names[i], sizeof r->names[i], "%s", p.calls[i].name);
        snprintf(r->args[i], sizeof r->args[i], "%s", p.calls[i].args);
    }
    EXPECT(!p.oom);
    ft_tool_parser_free(&p);
    json_decref(tools);
}

/* One-shot and byte-by-byte give the same content and calls. */
static void expect_parse(enum ft_tool_fmt fmt, const char *text, const char *content, int n_calls,
                         const char *name0, const char *args0, const char *name1,
                         const char *args1) {
    struct result a, b;
    run(fmt, text, 0, &a);
    run(fmt, text, 1, &b);
    CHECK_(!strcmp(a.content, content), "%s: content \"%s\" (want \"%s\")", ft_tool_fmt_name(fmt),
           a.content, content);
    EXPECT_STREQ(b.content, a.content);
    CHECK_(a.n_calls == n_calls, "%s: %d calls (want %d)", ft_tool_fmt_name(fmt), a.n_calls, n_calls);
    EXPECT_EQ(b.n_calls, a.n_calls);
    if (n_calls > 0 && a.n_calls > 0) {
        EXPECT_STREQ(a.names[0], name0);
        EXPECT_STREQ(a.args[0], args0);
        EXPECT_STREQ(b.args[0], args0);
    }
    if (n_calls > 1 && a.n_calls > 1) {
        EXPECT_STREQ(a.names[1], name1);
        EXPECT_STREQ(a.args[1], args1);
    }
}

TEST(hermes) {
    expect_parse(FT_TOOLS_HERMES,
                 "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                 "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                 "\"{\\\"tz\\\": \\\"UTC\\\"}\"}\n</tool_call>",
                 "I'll check.\n\n", 2, "get_weather", "{\"city\":\"Paris\"}", "get_time",
                 "{\"tz\":\"UTC\"}");
    expect_parse(FT_TOOLS_HERMES, "no calls, just < and <tool text", "no calls, just < and <tool text",
                 0, NULL, NULL, NULL, NULL);
    /* a block that is not a call comes back as content */
    expect_parse(FT_TOOLS_HERMES, "a<tool_call>not json</tool_call>b",
                 "a<tool_call>not json</tool_call>b", 0, NULL, NULL, NULL, NULL);
    /* an unclosed block at the end is parsed if it can be */
    expect_parse(FT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", "", 1, "f",
                 "{}", NULL, NULL);
    expect_parse(FT_TOOLS_HERMES, "<tool_call>\n{\"name\": \"f\", \"argu", "<tool_call>\n{\"name\": \"f\", \"argu",
                 0, NULL, NULL, NULL, NULL);
}

TEST(qwen3_coder_typed_parameters) {
    expect_parse(FT_TOOLS_QWEN3_CODER,
                 "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
                 "<parameter=days>\n3\n</parameter>\n<parameter=hot>\ntrue\n</parameter>\n"
                 "</function>\n</tool_call>",
                 "", 1, "get_weather", "{\"city\":\"New York\",\"days\":3,\"hot\":true}", NULL,
                 NULL);
    /* a string property keeps digits as text */
    expect_parse(FT_TOOLS_QWEN3_CODER,
                 "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
                 "</function>\n</tool_call>", "", 1, "get_weather", "{\"city\":\"42\"}", NULL, NULL);
}

TEST(llama3_json) {
    expect_parse(FT_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                 "", 1, "get_weather", "{\"city\":\"Oslo\"}", NULL, NULL);
    expect_parse(FT_TOOLS_LLAMA3,
                 "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                 "\"parameters\": {\"x\": 1}}", "", 2, "a", "{}", "b", "{\"x\":1}");
    expect_parse(FT_TOOLS_LLAMA3, "The answer is {not a call}", "The answer is {not a call}", 0,
                 NULL, NULL, NULL, NULL);
    expect_parse(FT_TOOLS_LLAMA3, "{\"x\": 1}", "{\"x\": 1}", 0, NULL, NULL, NULL, NULL);
}

TEST(mistral) {
    expect_parse(FT_TOOLS_MISTRAL,
                 "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
                 "{\"name\": \"get_time\", \"arguments\": {}}]",
                 "", 2, "get_weather", "{\"city\":\"Rome\"}", "get_time", "{}");
    expect_parse(FT_TOOLS_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}", "", 1,
                 "get_weather", "{\"city\":\"Rome\"}", NULL, NULL);
}

TEST(deepseek) {
    expect_parse(FT_TOOLS_DEEPSEEK,
                 "Sure.<" DS_BAR "tool" DS_SEP "calls" DS_SEP "begin" DS_BAR "><" DS_BAR "tool" DS_SEP
                 "call" DS_SEP "begin" DS_BAR ">function<" DS_BAR "tool" DS_SEP "sep" DS_BAR
                 ">get_weather\n```json\n{\"city\": \"Lima\"}\n```<" DS_BAR "tool" DS_SEP "call" DS_SEP
                 "end" DS_BAR "><" DS_BAR "tool" DS_SEP "calls" DS_SEP "end" DS_BAR ">",
                 "Sure.", 1, "get_weather", "{\"city\":\"Lima\"}", NULL, NULL);
    expect_parse(FT_TOOLS_DEEPSEEK,
                 "<" DS_BAR "tool" DS_SEP "calls" DS_SEP "begin" DS_BAR "><" DS_BAR "tool" DS_SEP
                 "call" DS_SEP "begin" DS_BAR ">get_time<" DS_BAR "tool" DS_SEP "sep" DS_BAR
                 ">{}<" DS_BAR "tool" DS_SEP "call" DS_SEP "end" DS_BAR "><" DS_BAR "tool" DS_SEP
                 "calls" DS_SEP "end" DS_BAR ">", "", 1, "get_time", "{}", NULL, NULL);
}

/* Kimi-K2: several calls a section, the name from the id functions.NAME:IDX, the id kept */
TEST(kimi) {
    expect_parse(FT_TOOLS_KIMI,
                 "Checking both." KS_B KC_B "functions.get_weather:0" KC_A "{\"city\": \"Bern\", "
                 "\"days\": 2}" KC_E KC_B "functions.get_time:1" KC_A "{}" KC_E KS_E " Done.",
                 "Checking both. Done.", 2, "get_weather", "{\"city\":\"Bern\",\"days\":2}",
                 "get_time", "{}");
    /* blanks around the parts; an id without "functions." or without an index */
    expect_parse(FT_TOOLS_KIMI,
                 KS_B "\n" KC_B " get_weather:12 " KC_A " {\"city\": \"Oslo\"} \n" KC_E "\n" KC_B
                 "functions.get_time" KC_A "{\"tz\": \"CET\"}" KC_E "\n" KS_E,
                 "", 2, "get_weather", "{\"city\":\"Oslo\"}", "get_time", "{\"tz\":\"CET\"}");
    /* no section end (the model stopped at <|im_end|>): parsed at the end of the text */
    expect_parse(FT_TOOLS_KIMI, "x" KS_B KC_B "functions.get_time:0" KC_A "{}" KC_E, "x", 1,
                 "get_time", "{}", NULL, NULL);
    /* the ids as written */
    struct ft_tool_parser p;
    ft_tool_parser_init(&p, FT_TOOLS_KIMI, NULL);
    const char *t = KS_B KC_B "functions.get_weather:3" KC_A "{}" KC_E KC_B " functions.get_time:4"
                    KC_A "{}" KC_E KS_E;
    ft_tool_parser_push(&p, t, strlen(t));
    ft_tool_parser_finish(&p);
    EXPECT_EQ(p.n_calls, 2);
    if (p.n_calls == 2) {
        EXPECT_STREQ(p.calls[0].id, "functions.get_weather:3");
        EXPECT_STREQ(p.calls[1].id, "functions.get_time:4");
        EXPECT_STREQ(p.calls[1].name, "get_time");
    }
    ft_tool_parser_free(&p);
    /* other formats have no id */
    ft_tool_parser_init(&p, FT_TOOLS_HERMES, NULL);
    t = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    ft_tool_parser_push(&p, t, strlen(t));
    ft_tool_parser_finish(&p);
    EXPECT(p.n_calls == 1 && p.calls[0].id == NULL);
    ft_tool_parser_free(&p);
    /* malformed sections are content: no argument marker, no id, not an object, a call cut
     * short by the next one's begin marker */
    const char *bad[] = {
        "a" KS_B KC_B "functions.get_time:0{}" KC_E KS_E "b",
        "a" KS_B KC_B KC_A "{}" KC_E KS_E "b",
        "a" KS_B KC_B "functions.get_time:0" KC_A "[1]" KC_E KS_E "b",
        "a" KS_B KC_B "functions.get_time:0" KC_A "{\"tz\": " KC_B "functions.x:1" KC_A "{}"
        KC_E KS_E "b",
        "a" KS_B "just text" KS_E "b",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_parse(FT_TOOLS_KIMI, bad[i], bad[i], 0, NULL, NULL, NULL, NULL);
}

TEST(glm_and_minimax) {
    expect_parse(FT_TOOLS_GLM,
                 "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Bern</arg_value>\n"
                 "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
                 "", 1, "get_weather", "{\"city\":\"Bern\",\"days\":2}", NULL, NULL);
    expect_parse(FT_TOOLS_MINIMAX,
                 "ok<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">"
                 "Kyiv</parameter>\n</invoke>\n<invoke name=\"get_time\">\n</invoke>\n"
                 "</minimax:tool_call>",
                 "ok", 2, "get_weather", "{\"city\":\"Kyiv\"}", "get_time", "{}");
}

/* The formats as the models write them (each family's template shows its model this form):
 * several calls a turn, text before them, values typed by the tool's schema. */
TEST(real_output_formats) {
    /* GLM-4.7: no newlines inside the block */
    expect_parse(FT_TOOLS_GLM,
                 "Checking both.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Bern"
                 "</arg_value><arg_key>hot</arg_key><arg_value>true</arg_value></tool_call>"
                 "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
                 "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
                 "Checking both.", 2, "get_weather", "{\"city\":\"Bern\",\"hot\":true}",
                 "get_weather", "{\"city\":\"Oslo\",\"days\":3}");
    /* GLM-4.5/4.6: each part on its own line, a call without arguments */
    expect_parse(FT_TOOLS_GLM,
                 "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York"
                 "</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>",
                 "\n\n", 2, "get_weather", "{\"city\":\"New York\"}", "get_time", "{}");
    /* Qwen3-Coder: two blocks, a multi-line string value kept as written */
    expect_parse(FT_TOOLS_QWEN3_CODER,
                 "I'll look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSt.\n"
                 "Petersburg\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
                 "</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
                 "I'll look.\n\n\n", 2, "get_weather",
                 "{\"city\":\"St.\\nPetersburg\",\"days\":2}", "get_time", "{}");
    /* MiniMax-M2: typed values; a property the schema does not name stays a string */
    expect_parse(FT_TOOLS_MINIMAX,
                 "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">"
                 "Lima</parameter>\n<parameter name=\"days\">4</parameter>\n<parameter name=\"hot\">"
                 "false</parameter>\n<parameter name=\"where\">{\"lat\": 1.5}</parameter>\n"
                 "</invoke>\n</minimax:tool_call>",
                 "", 1, "get_weather",
                 "{\"city\":\"Lima\",\"days\":4,\"hot\":false,\"where\":\"{\\\"lat\\\": 1.5}\"}",
                 NULL, NULL);
    /* Llama 3.1-3.3: the bare JSON object the template shows, as the whole reply */
    expect_parse(FT_TOOLS_LLAMA3,
                 "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 1}}",
                 "", 1, "get_weather", "{\"city\":\"Paris\",\"days\":1}", NULL, NULL);
}

/* gpt-oss: what the server's harmony splitter passes on for messages to functions */
TEST(harmony_calls) {
    expect_parse(FT_TOOLS_HARMONY,
                 "Let me check.<|start|>assistant<|channel|>commentary to=functions.get_weather "
                 "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"
                 "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}"
                 "<|call|>",
                 "Let me check.", 2, "get_weather", "{\"city\":\"Paris\"}", "get_time", "{}");
    expect_parse(FT_TOOLS_HARMONY, /* arguments that are not a JSON object stay text */
                 "<|start|>assistant<|channel|>commentary to=functions.f<|message|>oops<|call|>",
                 "<|start|>assistant<|channel|>commentary to=functions.f<|message|>oops<|call|>",
                 0, NULL, NULL, NULL, NULL);
    expect_parse(FT_TOOLS_HARMONY, "plain answer", "plain answer", 0, NULL, NULL, NULL, NULL);
}

/* What a stream sends (server/openai_gen.c does the same), by tool_calls index: a call's name
 * and the start of its arguments once the parser shows it live, then each new piece, then what
 * the finished call has beyond that. */
#define N_IDX 8
struct streamed {
    int n, hdr[N_IDX], pieces[N_IDX], early[N_IDX]; /* early: named while its block was open */
    int named[N_IDX]; /* times a name went out under the index */
    char name[N_IDX][64], args[N_IDX][512];
    size_t sent[N_IDX];
};

static void send_piece(struct streamed *t, int i, const char *s, size_t n) {
    if (!n) return;
    memcpy(t->args[i] + t->sent[i], s, n);
    t->sent[i] += n;
    t->args[i][t->sent[i]] = 0;
    t->pieces[i]++;
}

static void stream_calls(struct ft_tool_parser *p, struct streamed *t) {
    for (; t->n < p->n_calls; t->n++) {
        const int i = p->calls[t->n].index;
        const char *a = p->calls[t->n].args;
        if (i < 0 || i >= N_IDX) continue;
        if (!t->hdr[i]) {
            snprintf(t->name[i], sizeof t->name[i], "%s", p->calls[t->n].name);
            t->named[i]++;
        }
        if (!t->hdr[i] || !strncmp(a, t->args[i], t->sent[i]))
            send_piece(t, i, a + t->sent[i], strlen(a) - t->sent[i]);
        else
            t->sent[i] = (size_t)-1; /* what was sent is not the final text */
        t->hdr[i] = 1;
    }
    for (int j = 0; j < p->n_live && p->live_index + j < N_IDX; j++) {
        const struct ft_tool_live *l = &p->live[j];
        const int i = p->live_index + j;
        if (l->no_stream || !l->name_done) break;
        if (!t->hdr[i]) {
            t->hdr[i] = t->early[i] = 1;
            t->named[i]++;
            snprintf(t->name[i], sizeof t->name[i], "%.*s", (int)l->n_name, l->name);
        }
        if (l->n_args > t->sent[i]) send_piece(t, i, l->args + t->sent[i], l->n_args - t->sent[i]);
    }
}

/* Byte by byte: the pieces sent add up to each call's final arguments, which are JSON equal to
 * want[i]; want_live: calls that must have come in more than one piece. */
static void expect_streamed(enum ft_tool_fmt fmt, const char *text, int n_calls,
                            const char *const *names, const char *const *want, int want_live) {
    struct ft_tool_parser p;
    struct streamed t;
    memset(&t, 0, sizeof t);
    ft_tool_parser_init(&p, fmt, NULL);
    for (size_t i = 0; text[i]; i++) {
        ft_tool_parser_push(&p, text + i, 1);
        stream_calls(&p, &t);
    }
    ft_tool_parser_finish(&p);
    stream_calls(&p, &t);
    CHECK_(p.n_calls == n_calls, "%s: %d calls (want %d)", ft_tool_fmt_name(fmt), p.n_calls, n_calls);
    int live = 0;
    for (int i = 0; i < p.n_calls && i < 4; i++) {
        const int x = p.calls[i].index;
        EXPECT_EQ(x, i); /* no block failed: no index skipped */
        EXPECT_STREQ(t.name[x], names[i]);
        EXPECT_STREQ(t.args[x], p.calls[i].args);
        json_t *a = json_loads(p.calls[i].args, 0, NULL), *b = json_loads(want[i], 0, NULL);
        CHECK_(a && b && json_equal(a, b), "%s call %d: args %s (want %s)", ft_tool_fmt_name(fmt),
               i, p.calls[i].args, want[i]);
        json_decref(a);
        json_decref(b);
        live += t.pieces[x] > 1;
    }
    CHECK_(live >= want_live, "%s: %d calls streamed in pieces (want %d)", ft_tool_fmt_name(fmt),
           live, want_live);
    ft_tool_parser_free(&p);
}

TEST(arguments_streamed_in_pieces) {
    const char *n2[] = {"get_weather", "get_time"};
    expect_streamed(FT_TOOLS_HERMES,
                    "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris \\\"Nord\\\"\", \"days\": [1, 2],\n \"t\": \"\\u00e9\", \"x\": 1.50}}"
                    "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                    "\"{\\\"tz\\\": \\\"UTC\\\"}\"}\n</tool_call>",
                    2, n2,
                    (const char *[]){"{\"city\":\"Paris \\\"Nord\\\"\",\"days\":[1,2],\"t\":\"\\u00e9\",\"x\":1.5}",
                                     "{\"tz\":\"UTC\"}"},
                    1);
    expect_streamed(FT_TOOLS_HERMES, /* a list in one block; arguments before the name */
                    "<tool_call>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
                    "{\"arguments\": {\"tz\": \"CET\"}, \"name\": \"get_time\"}]</tool_call>",
                    2, n2, (const char *[]){"{\"city\":\"Rome\"}", "{\"tz\":\"CET\"}"}, 1);
    expect_streamed(FT_TOOLS_LLAMA3,
                    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"nested\": "
                    "{\"a\": {}}}}; {\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}",
                    2, n2, (const char *[]){"{\"city\":\"Oslo\",\"nested\":{\"a\":{}}}", "{\"tz\":\"CET\"}"},
                    2);
    expect_streamed(FT_TOOLS_MISTRAL,
                    "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
                    "{\"name\": \"get_time\", \"arguments\": {}}]",
                    2, n2, (const char *[]){"{\"city\":\"Rome\"}", "{}"}, 1);
    expect_streamed(FT_TOOLS_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}", 1, n2,
                    (const char *[]){"{\"city\":\"Rome\"}"}, 0); /* v11 form: whole */
    /* not a call after all: nothing live that the end does not confirm */
    struct ft_tool_parser p;
    ft_tool_parser_init(&p, FT_TOOLS_LLAMA3, NULL);
    const char *x = "{\"x\": {\"arguments\": {\"a\": 1}}}";
    for (size_t i = 0; x[i]; i++) {
        ft_tool_parser_push(&p, x + i, 1);
        for (int j = 0; j < p.n_live; j++) EXPECT(!p.live[j].name_done);
    }
    ft_tool_parser_finish(&p);
    EXPECT_EQ(p.n_calls, 0);
    ft_tool_parser_free(&p);
}

/* ---- qwen3_coder and harmony live: every cut of the text */

static const char *k_tools2 =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"hot\":{\"type\":\"boolean\"},\"where\":{\"type\":\"object\"},\"tags\":{\"type\":"
    "[\"array\",\"null\"]}}}}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}}}}}]";

struct cut_run {
    struct streamed t;
    char content[1024];
    int n_calls;
    char names[4][64], args[4][512];
    int index[4];
};

/* The content the parser released, onto b (NUL-terminated). */
static void take_out(struct ft_tool_parser *p, char *b, size_t cap, size_t *used) {
    if (p->n_out && *used + p->n_out < cap) memcpy(b + *used, p->out, p->n_out), *used += p->n_out;
    b[*used] = 0;
    p->n_out = 0;
}

/* text[0..n) pushed in the pieces that cuts[0..k) (ascending) make, the stream read after each */
static void cut_run(enum ft_tool_fmt fmt, const json_t *tools, const char *text, size_t n,
                    const size_t *cuts, int k, struct cut_run *r) {
    struct ft_tool_parser p;
    size_t used = 0;
    memset(r, 0, sizeof *r);
    ft_tool_parser_init(&p, fmt, tools);
    for (int i = 0; i <= k; i++) {
        const size_t a = i ? cuts[i - 1] : 0, b = i < k ? cuts[i] : n;
        ft_tool_parser_push(&p, text + a, b - a);
        stream_calls(&p, &r->t);
        take_out(&p, r->content, sizeof r->content, &used);
    }
    ft_tool_parser_finish(&p);
    stream_calls(&p, &r->t);
    take_out(&p, r->content, sizeof r->content, &used);
    r->n_calls = p.n_calls;
    for (int i = 0; i < p.n_calls && i < 4; i++) {
        snprintf(r->names[i], sizeof r->names[i], "%s", p.calls[i].name);
        snprintf(r->args[i], sizeof r->args[i], "%s", p.calls[i].args);
        r->index[i] = p.calls[i].index < N_IDX ? p.calls[i].index : 0;
    }
    EXPECT(!p.oom);
    ft_tool_parser_free(&p);
}

/* A cut run against the whole push (w): the same content, calls, names and argument texts,
 * and the pieces streamed (under each call's index) add up to them; every index named once,
 * the calls' indices rising; returns 0 or -1 (reported once). */
static int cut_same(const struct cut_run *r, const struct cut_run *w, const char *what) {
    int bad = strcmp(r->content, w->content) || r->n_calls != w->n_calls;
    for (int i = 0; !bad && i < w->n_calls && i < 4; i++) {
        const int x = r->index[i];
        bad = strcmp(r->names[i], w->names[i]) || strcmp(r->args[i], w->args[i]) ||
              strcmp(r->t.name[x], w->names[i]) || strcmp(r->t.args[x], w->args[i]) ||
              (i && x <= r->index[i - 1]);
    }
    for (int x = 0; !bad && x < N_IDX; x++) bad = r->t.named[x] > 1;
    CHECK_(!bad, "%s: %d calls, call 0 %s %s streamed as %s (whole: %d calls, %s %s)", what,
           r->n_calls, r->names[0], r->args[0], r->t.args[r->index[0]], w->n_calls, w->names[0],
           w->args[0]);
    return bad ? -1 : 0;
}

/* The text pushed whole, byte by byte, and cut in every way into two and three pieces: each
 * cut gives the whole push's content and calls, the argument pieces it streams add up to the
 * same text, byte for byte; the whole push's arguments are JSON equal to want[i] (parsed by
 * jansson). Byte by byte, want_live calls were named while their block was still open and
 * came in more than one piece. */
static void expect_cuts(enum ft_tool_fmt fmt, const char *text, size_t n, const char *content,
                        int n_calls, const char *const *names, const char *const *want,
                        int want_live) {
    json_t *tools = json_loads(k_tools2, 0, NULL);
    struct cut_run *w = malloc(sizeof *w), *r = malloc(sizeof *r);
    cut_run(fmt, tools, text, n, NULL, 0, w);
    CHECK_(!strcmp(w->content, content), "%s: content \"%s\" (want \"%s\")", ft_tool_fmt_name(fmt),
           w->content, content);
    CHECK_(w->n_calls == n_calls, "%s: %d calls (want %d)", ft_tool_fmt_name(fmt), w->n_calls,
           n_calls);
    for (int i = 0; i < w->n_calls && i < n_calls; i++) {
        EXPECT_STREQ(w->names[i], names[i]);
        json_t *a = json_loads(w->args[i], 0, NULL), *b = json_loads(want[i], 0, NULL);
        CHECK_(a && b && json_equal(a, b), "%s call %d: args %s (want %s)", ft_tool_fmt_name(fmt),
               i, w->args[i], want[i]);
        json_decref(a);
        json_decref(b);
    }
    size_t *cuts = malloc(n * sizeof *cuts);
    for (size_t i = 0; i + 1 < n; i++) cuts[i] = i + 1;
    cut_run(fmt, tools, text, n, cuts, (int)n - 1, r);
    cut_same(r, w, "byte by byte");
    int live = 0;
    for (int i = 0; i < r->n_calls && i < 4; i++)
        live += r->t.early[r->index[i]] && r->t.pieces[r->index[i]] > 1;
    CHECK_(live >= want_live, "%s: %d calls live in pieces (want %d)", ft_tool_fmt_name(fmt), live,
           want_live);
    int bad = 0;
    for (size_t i = 1; i < n && !bad; i++) {
        cut_run(fmt, tools, text, n, &i, 1, r);
        bad = cut_same(r, w, "two pieces");
        for (size_t j = i + 1; j < n && !bad && n <= 400; j++) {
            size_t c2[2] = {i, j};
            cut_run(fmt, tools, text, n, c2, 2, r);
            bad = cut_same(r, w, "three pieces");
        }
    }
    free(cuts);
    free(w);
    free(r);
    json_decref(tools);
}

#define CUTS(fmt, text, ...) expect_cuts(fmt, text, sizeof text - 1, __VA_ARGS__)

TEST(qwen3_coder_streamed) {
    const char *w1[] = {"get_weather"}, *t1[] = {"get_time"}, *wt[] = {"get_weather", "get_time"};
    /* escapes, UTF-8, Python True, an object, a typed list, a property the schema lacks (a
     * string), newlines kept but one each side */
    CUTS(FT_TOOLS_QWEN3_CODER,
         "Let me see.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nS\xc3\xa3o \"Paulo\""
         "\\ \t\x01 \xf0\x9f\x98\x80\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
         "<parameter=hot>\nTrue\n</parameter>\n<parameter=where>\n{\"lat\": 1.50, \"lon\": [1, 2]}"
         "\n</parameter>\n<parameter=tags>\n[\"a\", null]\n</parameter>\n<parameter=extra>\n\n\nx\n"
         "\n\n</parameter>\n</function>\n</tool_call>\nDone.",
         "Let me see.\n\nDone.", 1, w1,
         (const char *[]){"{\"city\":\"S\xc3\xa3o \\\"Paulo\\\"\\\\ \\t\\u0001 \xf0\x9f\x98\x80\","
                          "\"days\":3,\"hot\":true,\"where\":{\"lat\":1.5,\"lon\":[1,2]},"
                          "\"tags\":[\"a\",null],\"extra\":\"\\n\\nx\\n\\n\"}"},
         1);
    /* the first bytes of markers inside a value; a typed value that does not parse stays text */
    CUTS(FT_TOOLS_QWEN3_CODER,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\na</toolbox <parameter x </functio"
         " </param <b> <\n</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n"
         "</tool_call>",
         "", 1, w1,
         (const char *[]){"{\"city\":\"a</toolbox <parameter x </functio </param <b> <\","
                          "\"days\":\"three\"}"},
         1);
    /* no </parameter>, no </function>, no </tool_call>: parsed at the end of the text */
    CUTS(FT_TOOLS_QWEN3_CODER,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n", "",
         1, w1, (const char *[]){"{\"city\":\"Oslo\",\"days\":2}"}, 1);
    CUTS(FT_TOOLS_QWEN3_CODER,
         "<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC\n\n", "", 1, t1,
         (const char *[]){"{\"tz\":\"UTC\\n\"}"}, 1);
    /* bytes that are not UTF-8 (and a NUL) become U+FFFD, one per byte */
    CUTS(FT_TOOLS_QWEN3_CODER,
         "<tool_call><function=get_weather><parameter=city>\xff\xe2\x82</parameter>"
         "<parameter=n\xc3ote>\xe2\x82\xac\xed\xa0\x80 a\0b</parameter></function></tool_call>", "",
         1, w1,
         (const char *[]){"{\"city\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\",\"n\xef\xbf\xbdote\":"
                          "\"\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd a\xef\xbf\xbd"
                          "b\"}"},
         1);
    /* two blocks; a value ended by </function>; a parameter name cut by </function>; a
     * parameter given twice (the last one counts); a call without parameters */
    CUTS(FT_TOOLS_QWEN3_CODER,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome</function>\n</tool_call>\n"
         "<tool_call>\n<function=get_time>\n<parameter=tz>\nA\n</parameter>\n<parameter=tz>\nB\n"
         "</parameter>\n<parameter=bad</function>\n</tool_call>",
         "\n", 2, wt, (const char *[]){"{\"city\":\"Rome\"}", "{\"tz\":\"B\"}"}, 2);
    CUTS(FT_TOOLS_QWEN3_CODER, "Hi <tool_call>\n<function=get_time>\n</function>\n</tool_call>",
         "Hi ", 1, t1, (const char *[]){"{}"}, 1);
    /* not a call: given back as content, nothing live */
    CUTS(FT_TOOLS_QWEN3_CODER, "a<tool_call>\n<function=get_time\n</tool_call>b",
         "a<tool_call>\n<function=get_time\n</tool_call>b", 0, t1, NULL, 0);
}

TEST(harmony_streamed) {
    const char *wt[] = {"get_weather", "get_time"}, *t1[] = {"get_time"};
    CUTS(FT_TOOLS_HARMONY,
         "Let me check.<|start|>assistant<|channel|>commentary to=functions.get_weather "
         "<|constrain|>json<|message|> {\"city\": \"Paris \\\"N\\\"\", \"days\": [1, 2]}\n<|call|>"
         "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>",
         "Let me check.", 2, wt,
         (const char *[]){"{\"city\":\"Paris \\\"N\\\"\",\"days\":[1,2]}", "{}"}, 2);
    CUTS(FT_TOOLS_HARMONY,
         "<|start|>assistant<|channel|>commentary to=functions.get_time<|message|>{\"tz\": \"UTC\"}",
         "", 1, t1, (const char *[]){"{\"tz\":\"UTC\"}"}, 1);
    CUTS(FT_TOOLS_HARMONY,
         "<|start|>assistant<|channel|>commentary to=functions.f<|message|>oops<|call|>",
         "<|start|>assistant<|channel|>commentary to=functions.f<|message|>oops<|call|>", 0, t1,
         NULL, 0);
}

TEST(glm_streamed) {
    const char *w1[] = {"get_weather"}, *t1[] = {"get_time"}, *wt[] = {"get_weather", "get_time"};
    /* escapes, UTF-8, Python True, an object, a typed list, a property the schema lacks; GLM
     * keeps a value's newlines */
    CUTS(FT_TOOLS_GLM,
         "Let me see.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>S\xc3\xa3o "
         "\"Paulo\"\\ \t\x01 \xf0\x9f\x98\x80\n</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3"
         "</arg_value>\n<arg_key>hot</arg_key>\n<arg_value>True</arg_value>\n<arg_key>where"
         "</arg_key>\n<arg_value>{\"lat\": 1.50, \"lon\": [1, 2]}</arg_value>\n<arg_key>tags"
         "</arg_key>\n<arg_value>[\"a\", null]</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>"
         "\nx\n</arg_value>\n</tool_call>\nDone.",
         "Let me see.\n\nDone.", 1, w1,
         (const char *[]){"{\"city\":\"S\xc3\xa3o \\\"Paulo\\\"\\\\ \\t\\u0001 \xf0\x9f\x98\x80"
                          "\\n\",\"days\":3,\"hot\":true,\"where\":{\"lat\":1.5,\"lon\":[1,2]},"
                          "\"tags\":[\"a\",null],\"extra\":\"\\nx\\n\"}"},
         1);
    /* the first bytes of markers inside a value; a typed value that does not parse stays text */
    CUTS(FT_TOOLS_GLM,
         "<tool_call>get_weather<arg_key>city</arg_key><arg_value>a</arg_valu <arg_key> </tool <b>"
         " <</arg_value><arg_key>days</arg_key><arg_value>three</arg_value></tool_call>",
         "", 1, w1,
         (const char *[]){"{\"city\":\"a</arg_valu <arg_key> </tool <b> <\",\"days\":\"three\"}"},
         1);
    /* bytes that are not UTF-8 (and a NUL) become U+FFFD, one per byte */
    CUTS(FT_TOOLS_GLM,
         "<tool_call>get_weather<arg_key>city</arg_key><arg_value>\xff\xe2\x82</arg_value>"
         "<arg_key>n\xc3ote</arg_key><arg_value>\xe2\x82\xac\xed\xa0\x80 a\0b</arg_value>"
         "</tool_call>", "", 1, w1,
         (const char *[]){"{\"city\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\",\"n\xef\xbf\xbdote\":"
                          "\"\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd a\xef\xbf\xbd"
                          "b\"}"},
         1);
    /* two blocks, a parameter given twice (the last one counts), the second block unclosed */
    CUTS(FT_TOOLS_GLM,
         "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>A</arg_value>\n<arg_key>city"
         "</arg_key>\n<arg_value>B</arg_value>\n</tool_call>\n<tool_call> get_time \n<arg_key>tz"
         "</arg_key>\n<arg_value>UTC</arg_value>\n",
         "\n", 2, wt, (const char *[]){"{\"city\":\"B\"}", "{\"tz\":\"UTC\"}"}, 2);
    CUTS(FT_TOOLS_GLM, "Hi <tool_call>get_time\n</tool_call>", "Hi ", 1, t1,
         (const char *[]){"{}"}, 0);
    /* not a call (a value without its end tag; no name): given back as content */
    CUTS(FT_TOOLS_GLM, "a<tool_call>get_time<arg_key>tz</arg_key><arg_value>UTC</tool_call>b",
         "a<tool_call>get_time<arg_key>tz</arg_key><arg_value>UTC</tool_call>b", 0, t1, NULL, 0);
    CUTS(FT_TOOLS_GLM, "a<tool_call>\n<arg_key>tz</arg_key></tool_call>b",
         "a<tool_call>\n<arg_key>tz</arg_key></tool_call>b", 0, t1, NULL, 0);
}

TEST(minimax_streamed) {
    const char *w1[] = {"get_weather"}, *t1[] = {"get_time"}, *wt[] = {"get_weather", "get_time"};
    CUTS(FT_TOOLS_MINIMAX,
         "Let me see.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter "
         "name=\"city\">\nS\xc3\xa3o \"Paulo\"\\ \t\x01 \xf0\x9f\x98\x80\n</parameter>\n"
         "<parameter name=\"days\">3</parameter>\n<parameter name=\"hot\">\nTrue\n</parameter>\n"
         "<parameter name=\"where\">"
         "{\"lat\": 1.50, \"lon\": [1, 2]}</parameter>\n<parameter name=\"tags\">[\"a\", null]"
         "</parameter>\n<parameter name=\"extra\">\n\n\nx\n\n\n</parameter>\n</invoke>\n"
         "<invoke name=\"get_time\">\n<parameter name=\"tz\" x=\"1\">UTC</parameter>\n</invoke>\n"
         "</minimax:tool_call>\nDone.",
         "Let me see.\n\nDone.", 2, wt,
         (const char *[]){"{\"city\":\"S\xc3\xa3o \\\"Paulo\\\"\\\\ \\t\\u0001 \xf0\x9f\x98\x80\","
                          "\"days\":3,\"hot\":true,\"where\":{\"lat\":1.5,\"lon\":[1,2]},"
                          "\"tags\":[\"a\",null],\"extra\":\"\\n\\nx\\n\\n\"}",
                          "{\"tz\":\"UTC\"}"},
         2);
    /* the first bytes of markers inside a value; a typed value that does not parse stays text */
    CUTS(FT_TOOLS_MINIMAX,
         "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">a</paramete "
         "<parameter name=\"x\"> </invok </minimax <\n</parameter><parameter name=\"days\">three"
         "</parameter></invoke></minimax:tool_call>",
         "", 1, w1,
         (const char *[]){"{\"city\":\"a</paramete <parameter name=\\\"x\\\"> </invok "
                          "</minimax <\",\"days\":\"three\"}"},
         1);
    /* bytes that are not UTF-8 (and a NUL) become U+FFFD, one per byte */
    CUTS(FT_TOOLS_MINIMAX,
         "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">\xff\xe2\x82"
         "</parameter><parameter name=\"n\xc3ote\">\xe2\x82\xac\xed\xa0\x80 a\0b</parameter>"
         "</invoke></minimax:tool_call>", "", 1, w1,
         (const char *[]){"{\"city\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\",\"n\xef\xbf\xbdote\":"
                          "\"\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd a\xef\xbf\xbd"
                          "b\"}"},
         1);
    /* a call without parameters; an unclosed block, parsed at the end of the text */
    CUTS(FT_TOOLS_MINIMAX,
         "Hi <minimax:tool_call>\n<invoke name=\"get_time\">\n</invoke>\n</minimax:tool_call>",
         "Hi ", 1, t1, (const char *[]){"{}"}, 0);
    CUTS(FT_TOOLS_MINIMAX,
         "<minimax:tool_call>\n<invoke name=\"get_time\">\n<parameter name=\"tz\">\nUTC\n\n"
         "</parameter>\n</invoke>\n", "", 1, t1, (const char *[]){"{\"tz\":\"UTC\\n\"}"}, 1);
    /* not a call (</invoke> before </parameter>; no </invoke>): given back as content */
    CUTS(FT_TOOLS_MINIMAX,
         "a<minimax:tool_call><invoke name=\"get_time\"><parameter name=\"tz\">UTC</invoke>"
         "</minimax:tool_call>b",
         "a<minimax:tool_call><invoke name=\"get_time\"><parameter name=\"tz\">UTC</invoke>"
         "</minimax:tool_call>b", 0, t1, NULL, 0);
    CUTS(FT_TOOLS_MINIMAX,
         "a<minimax:tool_call><invoke name=\"get_time\"><parameter name=\"tz\">UTC</parameter>"
         "</minimax:tool_call>b",
         "a<minimax:tool_call><invoke name=\"get_time\"><parameter name=\"tz\">UTC</parameter>"
         "</minimax:tool_call>b", 0, t1, NULL, 0);
}

#define DS_M(x) "<" DS_BAR "tool" DS_SEP x DS_BAR ">"
#define DS_B DS_M("calls" DS_SEP "begin")
#define DS_E DS_M("calls" DS_SEP "end")
#define DC_B DS_M("call" DS_SEP "begin")
#define DC_E DS_M("call" DS_SEP "end")
#define DS_S DS_M("sep")

TEST(deepseek_streamed) {
    const char *w1[] = {"get_weather"}, *t1[] = {"get_time"}, *wt[] = {"get_weather", "get_time"};
    /* V3: two fenced calls; escapes, UTF-8, backticks and a marker's first bytes in a string */
    CUTS(FT_TOOLS_DEEPSEEK,
         "Sure." DS_B DC_B "function" DS_S "get_weather\n```json\n{\"city\": \"S\xc3\xa3o \\\"P\\\""
         " `` <" DS_BAR "tool <" DS_BAR "\", \"days\": [1, 2],\n \"x\": {\"a\": 1.50}}\n```"
         DC_E "\n" DC_B "function" DS_S "get_time\n```json\n{}\n```" DC_E DS_E "Done.",
         "Sure.Done.", 2, wt,
         (const char *[]){"{\"city\":\"S\xc3\xa3o \\\"P\\\" `` <" DS_BAR "tool <" DS_BAR "\","
                          "\"days\":[1,2],\"x\":{\"a\":1.5}}", "{}"},
         2);
    /* V3.1: the bare object after the sep (``` in it is text); blanks around the fence */
    CUTS(FT_TOOLS_DEEPSEEK, DS_B DC_B "get_time" DS_S "{\"tz\": \"```UTC\"}" DC_E DS_E, "", 1, t1,
         (const char *[]){"{\"tz\":\"```UTC\"}"}, 1);
    CUTS(FT_TOOLS_DEEPSEEK,
         "ok " DS_B DC_B "get_time \n" DS_S " \n```json\n {\"tz\" : \"UTC\" } \n```\n" DC_E DS_E,
         "ok ", 1, t1, (const char *[]){"{\"tz\":\"UTC\"}"}, 1);
    /* no call end, no block end: parsed at the end of the text */
    CUTS(FT_TOOLS_DEEPSEEK, DS_B DC_B "function" DS_S "get_weather\n```json\n{\"city\": \"Oslo\"}",
         "", 1, w1, (const char *[]){"{\"city\":\"Oslo\"}"}, 1);
    /* not calls, given back as content: ``` inside the fenced object, no sep, not an object, an
     * object the call's end cuts short (the first and the last show their name first) */
    CUTS(FT_TOOLS_DEEPSEEK,
         "a" DS_B DC_B "function" DS_S "get_time\n```json\n{\"tz\": \"U```\"}\n```" DC_E DS_E "b",
         "a" DS_B DC_B "function" DS_S "get_time\n```json\n{\"tz\": \"U```\"}\n```" DC_E DS_E "b",
         0, t1, NULL, 0);
    CUTS(FT_TOOLS_DEEPSEEK, "a" DS_B DC_B "get_time{}" DC_E DS_E "b",
         "a" DS_B DC_B "get_time{}" DC_E DS_E "b", 0, t1, NULL, 0);
    CUTS(FT_TOOLS_DEEPSEEK, DS_B DC_B "function" DS_S "get_time\n```json\n[1]\n```" DC_E DS_E,
         DS_B DC_B "function" DS_S "get_time\n```json\n[1]\n```" DC_E DS_E, 0, t1, NULL, 0);
    CUTS(FT_TOOLS_DEEPSEEK, DS_B DC_B "get_time" DS_S "{\"tz\": 1" DC_E DS_E,
         DS_B DC_B "get_time" DS_S "{\"tz\": 1" DC_E DS_E, 0, t1, NULL, 0);
}

TEST(kimi_streamed) {
    const char *t1[] = {"get_time"}, *wt[] = {"get_weather", "get_time"};
    /* two calls; escapes, UTF-8 and a marker's first bytes inside a string */
    CUTS(FT_TOOLS_KIMI,
         "Sure." KS_B KC_B "functions.get_weather:0" KC_A "{\"city\": \"S\xc3\xa3o \\\"P\\\" "
         "<|tool <|tool_call\", \"days\": [1, 2],\n \"where\": {\"a\": 1.50}}" KC_E KC_B
         "functions.get_time:1" KC_A "{}" KC_E KS_E "Done.",
         "Sure.Done.", 2, wt,
         (const char *[]){"{\"city\":\"S\xc3\xa3o \\\"P\\\" <|tool <|tool_call\","
                          "\"days\":[1,2],\"where\":{\"a\":1.5}}", "{}"},
         2);
    /* blanks around the object; no section end: parsed at the end of the text */
    CUTS(FT_TOOLS_KIMI, "ok " KS_B KC_B " functions.get_time:7 " KC_A " \n{\"tz\" : \"UTC\" } \n"
         KC_E, "ok ", 1, t1, (const char *[]){"{\"tz\":\"UTC\"}"}, 1);
    /* not calls, given back as content: no argument marker, not an object, an object the
     * call's end cuts short */
    CUTS(FT_TOOLS_KIMI, "a" KS_B KC_B "functions.get_time:0{}" KC_E KS_E "b",
         "a" KS_B KC_B "functions.get_time:0{}" KC_E KS_E "b", 0, t1, NULL, 0);
    CUTS(FT_TOOLS_KIMI, "a" KS_B KC_B "functions.get_time:0" KC_A "[1]" KC_E KS_E "b",
         "a" KS_B KC_B "functions.get_time:0" KC_A "[1]" KC_E KS_E "b", 0, t1, NULL, 0);
    CUTS(FT_TOOLS_KIMI, KS_B KC_B "functions.get_time:0" KC_A "{\"tz\": 1" KC_E KS_E,
         KS_B KC_B "functions.get_time:0" KC_A "{\"tz\": 1" KC_E KS_E, 0, t1, NULL, 0);
}

/* Byte by byte, a block that fails after it showed n_shown calls: they keep their indices
 * (named once, their arguments as they went out: shown_args), its text goes to content, the
 * next call gets index n_shown; pushed whole, nothing was shown and no index is skipped. */
static void expect_kept_index(enum ft_tool_fmt fmt, const char *text, const char *content,
                              int n_shown, const char *const *shown_names,
                              const char *const *shown_args, const char *next_name,
                              const char *next_args) {
    json_t *tools = json_loads(k_tools2, 0, NULL);
    struct cut_run *w = malloc(sizeof *w), *r = malloc(sizeof *r);
    const size_t n = strlen(text);
    size_t *cuts = malloc(n * sizeof *cuts);
    for (size_t i = 0; i + 1 < n; i++) cuts[i] = i + 1;
    cut_run(fmt, tools, text, n, cuts, (int)n - 1, r);
    cut_run(fmt, tools, text, n, NULL, 0, w);
    const char *f = ft_tool_fmt_name(fmt);
    CHECK_(!strcmp(r->content, content), "%s: content \"%s\" (want \"%s\")", f, r->content,
           content);
    EXPECT_STREQ(w->content, content);
    CHECK_(r->n_calls == 1 && r->index[0] == n_shown, "%s: %d calls, index %d (want 1, %d)", f,
           r->n_calls, r->index[0], n_shown);
    CHECK_(w->n_calls == 1 && w->index[0] == 0, "%s whole: %d calls, index %d (want 1, 0)", f,
           w->n_calls, w->index[0]);
    EXPECT_STREQ(r->names[0], next_name);
    EXPECT_STREQ(r->args[0], next_args);
    EXPECT_STREQ(r->t.name[n_shown], next_name);
    EXPECT_STREQ(r->t.args[n_shown], next_args);
    EXPECT_EQ(r->t.named[n_shown], 1);
    for (int x = 0; x < n_shown; x++) {
        EXPECT_EQ(r->t.named[x], 1);
        EXPECT_STREQ(r->t.name[x], shown_names[x]);
        EXPECT_STREQ(r->t.args[x], shown_args[x]);
    }
    free(cuts);
    free(w);
    free(r);
    json_decref(tools);
}

TEST(failed_block_keeps_its_index) {
    const char *w1[] = {"get_weather"}, *wt[] = {"get_weather", "get_time"};
    /* hermes: text after the call object; arguments cut short; a list failing at its third */
    expect_kept_index(
        FT_TOOLS_HERMES,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}} x\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n"
        "</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}} x\n"
        "</tool_call>\n",
        1, w1, (const char *[]){"{\"city\":\"Rome\"}"}, "get_time", "{\"tz\":\"UTC\"}");
    expect_kept_index(
        FT_TOOLS_HERMES,
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro</tool_call>"
        "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro</tool_call>", 1,
        w1, (const char *[]){"{\"city\":\"Ro"}, "get_time", "{}");
    expect_kept_index(
        FT_TOOLS_HERMES,
        "<tool_call>[{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"get_time\", "
        "\"arguments\": {\"tz\": \"A\"}}, 5]</tool_call>ok<tool_call>{\"name\": \"get_time\", "
        "\"arguments\": {\"tz\": \"B\"}}</tool_call>",
        "<tool_call>[{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"get_time\", "
        "\"arguments\": {\"tz\": \"A\"}}, 5]</tool_call>ok",
        2, wt, (const char *[]){"{}", "{\"tz\":\"A\"}"}, "get_time", "{\"tz\":\"B\"}");
    /* harmony: a body that is more than its object */
    expect_kept_index(
        FT_TOOLS_HARMONY,
        "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>"
        "{\"city\": \"Rome\"} x<|call|><|start|>assistant<|channel|>commentary "
        "to=functions.get_time<|message|>{}<|call|>",
        "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>"
        "{\"city\": \"Rome\"} x<|call|>",
        1, w1, (const char *[]){"{\"city\":\"Rome\"}"}, "get_time", "{}");
    /* deepseek: the second call of a block breaks it; the next block's call */
    expect_kept_index(
        FT_TOOLS_DEEPSEEK,
        DS_B DC_B "get_weather" DS_S "{\"city\": \"Rome\"}" DC_E DC_B "get_time" DS_S "{\"tz\""
        DC_E DS_E "\n" DS_B DC_B "get_time" DS_S "{}" DC_E DS_E,
        DS_B DC_B "get_weather" DS_S "{\"city\": \"Rome\"}" DC_E DC_B "get_time" DS_S "{\"tz\""
        DC_E DS_E "\n",
        2, wt, (const char *[]){"{\"city\":\"Rome\"}", "{\"tz\""}, "get_time", "{}");
    /* kimi: the same */
    expect_kept_index(
        FT_TOOLS_KIMI,
        KS_B KC_B "functions.get_weather:0" KC_A "{\"city\": \"Rome\"}" KC_E KC_B
        "functions.get_time:1" KC_A "{\"tz\"" KC_E KS_E "\n" KS_B KC_B "functions.get_time:2" KC_A
        "{}" KC_E KS_E,
        KS_B KC_B "functions.get_weather:0" KC_A "{\"city\": \"Rome\"}" KC_E KC_B
        "functions.get_time:1" KC_A "{\"tz\"" KC_E KS_E "\n",
        2, wt, (const char *[]){"{\"city\":\"Rome\"}", "{\"tz\""}, "get_time", "{}");
    /* and every cut of a failed block before a good one gives the same content and call */
    const char *t1[] = {"get_time"};
    CUTS(FT_TOOLS_HERMES,
         "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": 1}} x</tool_call>"
         "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}</tool_call>",
         "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": 1}} x</tool_call>", 1,
         t1, (const char *[]){"{\"tz\":\"UTC\"}"}, 1);
}

TEST(names_and_detection) {
    for (int f = 0; f < FT_TOOLS_N; f++) EXPECT_EQ(ft_tool_fmt_from_name(ft_tool_fmt_name(f)), f);
    EXPECT_EQ(ft_tool_fmt_from_name("bogus"), -1);
    EXPECT_CONTAINS(ft_tool_fmt_names(), "hermes");
    EXPECT_EQ(ft_tool_fmt_detect("{{ '<tool_call>' }}"), FT_TOOLS_HERMES);
    EXPECT_EQ(ft_tool_fmt_detect("<tool_call><function=x><parameter=y>"), FT_TOOLS_QWEN3_CODER);
    EXPECT_EQ(ft_tool_fmt_detect("<tool_call>{{ name }}<arg_key>"), FT_TOOLS_GLM);
    EXPECT_EQ(ft_tool_fmt_detect("<minimax:tool_call>"), FT_TOOLS_MINIMAX);
    EXPECT_EQ(ft_tool_fmt_detect("[TOOL_CALLS]"), FT_TOOLS_MISTRAL);
    EXPECT_EQ(ft_tool_fmt_detect("<|tool_calls_section_begin|>"), FT_TOOLS_KIMI);
    EXPECT_EQ(ft_tool_fmt_of_family("kimi_k2"), FT_TOOLS_KIMI);
    EXPECT_CONTAINS(ft_tool_fmt_names(), "kimi_k2");
    EXPECT_EQ(ft_tool_fmt_detect("'<|start|>assistant to=' 'functions.' + n + '<|channel|>' "
                                 "'<|call|>'"), FT_TOOLS_HARMONY);
    EXPECT_EQ(ft_tool_fmt_detect("no tools here"), FT_TOOLS_NONE);
    EXPECT_EQ(ft_tool_fmt_detect(NULL), FT_TOOLS_NONE);
    EXPECT_EQ(ft_tool_fmt_of_family("glm4"), FT_TOOLS_GLM);
    EXPECT_EQ(ft_tool_fmt_of_family("harmony"), FT_TOOLS_HARMONY);
    EXPECT_EQ(ft_tool_fmt_of_family("llama3"), FT_TOOLS_NONE); /* Llama 3.0: no tool calls */
    for (int f = FT_TOOLS_HERMES; f < FT_TOOLS_N; f++) /* every format can be forced */
        CHECK_(ft_tool_fmt_grammar(f) != NULL, "%s has a grammar", ft_tool_fmt_name(f));
    EXPECT(ft_tool_fmt_grammar(FT_TOOLS_NONE) == NULL);
}

/* The forcing grammar writes calls the way the family's own chat template renders them: the
 * template's rendering of an assistant call (text/chat.h, checked against transformers in
 * test_chat) matches the grammar from its open marker to a complete end. Harmony's template
 * puts the recipient before the channel, while the grammar writes what gpt-oss emits (the
 * recipient after it; the parser reads both: harmony_calls); Mistral's writes call ids. */
TEST(grammar_writes_what_the_templates_render) {
    static const struct { const char *family; enum ft_tool_fmt fmt; } k_fams[] = {
        {"qwen2", FT_TOOLS_HERMES},        {"qwen3_coder", FT_TOOLS_QWEN3_CODER},
        {"llama3_1", FT_TOOLS_LLAMA3},     {"deepseek3", FT_TOOLS_DEEPSEEK},
        {"glm4", FT_TOOLS_GLM},            {"minimax", FT_TOOLS_MINIMAX},
        {"kimi_k2", FT_TOOLS_KIMI}};
    const char *tools_text =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{"
        "\"type\":\"integer\"},\"units\":{\"enum\":[\"metric\",\"imperial\"]}},"
        "\"required\":[\"city\",\"days\"]}}}]";
    json_t *tools = json_loads(tools_text, 0, NULL);
    /* (Kimi's template writes the id: the grammar writes the model's own functions.N:0) */
    struct ft_chat_tool_call call = {"call_1", "get_weather",
                                     "{\"city\": \"New York\", \"days\": 3, \"units\": \"metric\"}"};
    struct ft_chat_msg msgs[2] = {{.role = FT_ROLE_USER, .content = "Weather?"},
                                  {.role = FT_ROLE_ASSISTANT, .tool_calls = &call,
                                   .n_tool_calls = 1}};
    for (size_t i = 0; i < sizeof k_fams / sizeof k_fams[0]; i++) {
        struct ft_chat_template *t = NULL;
        char *text = NULL;
        struct ft_chat_opts o = {.tools_json = tools_text};
        call.id = k_fams[i].fmt == FT_TOOLS_KIMI ? "functions.get_weather:0" : "call_1";
        EXPECT_OK(ft_chat_template_detect(NULL, k_fams[i].family, &t));
        if (!t) continue;
        EXPECT_OK(ft_chat_render(t, msgs, 2, &o, &text));
        const struct ft_jg_calls_fmt *f = ft_tool_fmt_grammar(k_fams[i].fmt);
        struct ft_jg *g = NULL;
        EXPECT_OK(ft_jg_compile_calls(tools, NULL, f, &g));
        /* the call starts at the last open marker (Llama 3's has none: at '{"name"') */
        const char *needle = *f->open ? f->open : "{\"name\"", *c = text ? strstr(text, needle) : NULL;
        for (const char *q = c; q && (q = strstr(q + 1, needle)) != NULL;) c = q;
        int complete = 0;
        if (c && g) {
            struct ft_jg_state st, t;
            ft_jg_start(g, &st);
            for (const char *q = c; *q; q++) {
                t = st;
                if (ft_jg_feed(g, &t, q, 1)) break;
                st = t;
                complete |= ft_jg_accepting(g, &st);
            }
            /* DeepSeek-V3's template leaves the first call's <｜tool▁calls▁end｜> out (the model
             * writes it): the close marker must complete it */
            if (!complete && k_fams[i].fmt == FT_TOOLS_DEEPSEEK)
                complete = !ft_jg_feed(g, &st, f->close, strlen(f->close)) && ft_jg_accepting(g, &st);
        }
        CHECK_(complete, "%s: the template's call matches the grammar: %s", k_fams[i].family,
               c ? c : text);
        ft_jg_free(g);
        free(text);
        ft_chat_template_free(t);
    }
    json_decref(tools);
}

TEST_MAIN("tool_parse")
