/* test_chat.c — chat templates: every reference rendering in tests/data/chat/<family>.json
 * (transformers' apply_chat_template on the real template, see tools/gen_chat_refs.py) must be
 * reproduced byte for byte, template errors must be errors, and family detection / unknown names
 * must behave (one-line messages listing the known names). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/file.h"
#include "core/status.h"
#include "test.h"
#include "text/chat.h"
#include "text/tool_parse.h"

static enum ft_chat_role role_of(const char *s) {
    if (strcmp(s, "system") == 0) return FT_ROLE_SYSTEM;
    if (strcmp(s, "assistant") == 0) return FT_ROLE_ASSISTANT;
    if (strcmp(s, "tool") == 0) return FT_ROLE_TOOL;
    return FT_ROLE_USER;
}

static const char *str_or_null(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void show_diff(const char *name, const char *got, const char *want) {
    size_t i = 0;
    while (got[i] && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: differs at byte %zu\n    got:  \"%.80s\"\n    want: \"%.80s\"\n", name,
            i, got + from, want + from);
}

/* Runs every case of tests/data/chat/<file>.json, whose template must be recognised as
 * `family`; returns the number of cases checked. */
static int run_file(const char *file, const char *family) {
    char path[512];
    snprintf(path, sizeof path, "%s/chat/%s.json", FT_TEST_DATA, file);
    json_error_t e;
    json_t *doc = json_load_file(path, 0, &e);
    EXPECT(doc != NULL);
    if (!doc) {
        fprintf(stderr, "  %s: %s\n", path, e.text);
        return 0;
    }
    struct ft_chat_template *t = NULL;
    EXPECT_OK(ft_chat_template_detect(str_or_null(doc, "template"), NULL, &t));
    EXPECT_STREQ(ft_chat_template_name(t), family);
    int n_cases = 0;
    json_t *cases = json_object_get(doc, "cases"), *c;
    size_t ci;
    json_array_foreach(cases, ci, c) {
        const char *name = str_or_null(c, "name");
        json_t *jm = json_object_get(c, "messages"), *jo = json_object_get(c, "options"), *m;
        struct ft_chat_msg msgs[32];
        struct ft_chat_tool_call calls[32][4];
        char *args_text[128];
        int n_args = 0;
        size_t mi;
        int n = 0;
        json_array_foreach(jm, mi, m) {
            msgs[n].role = role_of(str_or_null(m, "role"));
            msgs[n].content = str_or_null(m, "content");
            msgs[n].reasoning = str_or_null(m, "reasoning");
            msgs[n].name = str_or_null(m, "name");
            msgs[n].tool_calls = calls[n];
            msgs[n].n_tool_calls = 0;
            json_t *tc = json_object_get(m, "tool_calls"), *call;
            size_t ti;
            json_array_foreach(tc, ti, call) {
                json_t *fn = json_object_get(call, "function");
                struct ft_chat_tool_call *k = &calls[n][msgs[n].n_tool_calls++];
                k->id = str_or_null(call, "id");
                k->name = str_or_null(fn, "name");
                json_t *ja = json_object_get(fn, "arguments");
                /* an object travels as its JSON text; a string (DeepSeek's refs) as is */
                k->arguments = args_text[n_args++] =
                    json_is_string(ja) ? strdup(json_string_value(ja))
                                       : json_dumps(ja, JSON_COMPACT);
            }
            n++;
        }
        json_t *jt = json_object_get(jo, "tools");
        char *tools_text = json_is_array(jt) ? json_dumps(jt, JSON_COMPACT) : NULL;
        struct ft_chat_opts o = {
            .add_generation_prompt =
                (int)json_integer_value(json_object_get(jo, "add_generation_prompt")),
            .enable_thinking = (int)json_integer_value(json_object_get(jo, "enable_thinking")),
            .bos_token = str_or_null(jo, "bos_token"),
            .eos_token = str_or_null(jo, "eos_token"),
            .date = str_or_null(jo, "date"),
            .tools_json = tools_text,
        };
        const char *want = str_or_null(c, "expected");
        char *got = NULL;
        enum ft_status st = ft_chat_render(t, msgs, n, &o, &got);
        if (want) {
            CHECK_(st == FT_OK, "%s/%s: render failed: %s", family, name, ft_error());
            if (st == FT_OK) {
                int same = strcmp(got, want) == 0;
                CHECK_(same, "%s/%s: rendering differs from transformers", family, name);
                if (!same) show_diff(name, got, want);
            }
        } else {
            CHECK_(st == FT_ERR_INVALID_ARG,
                   "%s/%s: expected an error like the template (%s), got %d", family, name,
                   str_or_null(c, "error"), (int)st);
            CHECK_(strstr(ft_error(), family) != NULL, "%s/%s: error names the template: %s",
                   family, name, ft_error());
        }
        free(got);
        free(tools_text);
        for (int i = 0; i < n_args; i++) free(args_text[i]);
        n_cases++;
    }
    ft_chat_template_free(t);
    json_decref(doc);
    return n_cases;
}

static int run_family(const char *family) {
    return run_file(family, family);
}

TEST(qwen2_tools_match_transformers) {
    EXPECT(run_file("tools_qwen2", "qwen2") >= 12);
}
TEST(qwen3_tools_match_transformers) {
    EXPECT(run_file("tools_qwen3", "qwen3") >= 12);
}
TEST(mistral_tools_match_transformers) {
    EXPECT(run_file("tools_mistral", "mistral") >= 30);
}
TEST(deepseek3_tools_match_transformers) {
    EXPECT(run_file("tools_deepseek3", "deepseek3") >= 30);
}
TEST(harmony_tools_match_transformers) {
    EXPECT(run_file("tools_harmony", "harmony") >= 30);
}

TEST(llama3_1_tools_match_transformers) {
    EXPECT(run_file("tools_llama3_1", "llama3_1") >= 40);
    EXPECT(run_file("tools_llama3_2", "llama3_1") >= 36);
}

TEST(qwen3_coder_tools_match_transformers) {
    EXPECT(run_file("tools_qwen3_coder", "qwen3_coder") >= 40);
}

TEST(glm4_tools_match_transformers) {
    EXPECT(run_file("tools_glm4_6", "glm4") >= 40);
    EXPECT(run_file("tools_glm4_7", "glm4") >= 40);
}

TEST(minimax_tools_match_transformers) {
    EXPECT(run_file("tools_minimax_m2", "minimax") >= 40);
}

TEST(kimi_k2_tools_match_transformers) {
    EXPECT(run_file("tools_kimi_k2", "kimi_k2") >= 46);
}

/* Kimi-K2-Thinking / K2.5 write <think> in every assistant turn: a near miss, not rendered as
 * K2-Instruct; the tokenizer fixture's small template (tests/data/tiktoken) is K2's shape. */
TEST(kimi_detection) {
    struct ft_chat_template *t = NULL;
    EXPECT_EQ(ft_chat_template_detect("<|im_assistant|>assistant<|im_middle|><think></think>",
                                      NULL, &t), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "Kimi-K2-Thinking");
    EXPECT_CONTAINS(ft_error(), "kimi_k2");
    char path[512], *text = NULL;
    size_t size = 0;
    snprintf(path, sizeof path, "%s/tiktoken/tokenizer_config.json", FT_TEST_DATA);
    EXPECT_OK(ft_file_read(path, &text, &size));
    json_t *cfg = text ? json_loads(text, 0, NULL) : NULL;
    EXPECT_OK(ft_chat_template_detect(str_or_null(cfg, "chat_template"), NULL, &t));
    EXPECT_STREQ(ft_chat_template_name(t), "kimi_k2");
    EXPECT(ft_chat_supports_tools(t));
    ft_chat_template_free(t);
    json_decref(cfg);
    free(text);
}

/* Each template that writes tool calls is paired with the output parser of its format. */
static void detect_fmt(const char *file, enum ft_tool_fmt want) {
    char path[512];
    snprintf(path, sizeof path, "%s/chat/%s.json", FT_TEST_DATA, file);
    json_t *doc = json_load_file(path, 0, NULL);
    EXPECT(doc != NULL);
    enum ft_tool_fmt got = ft_tool_fmt_detect(str_or_null(doc, "template"));
    CHECK_(got == want, "%s: tool format %s, want %s", file, ft_tool_fmt_name(got),
           ft_tool_fmt_name(want));
    json_decref(doc);
}

TEST(tool_templates_pick_their_parser) {
    detect_fmt("tools_qwen2", FT_TOOLS_HERMES);
    detect_fmt("tools_qwen3", FT_TOOLS_HERMES);
    detect_fmt("tools_mistral", FT_TOOLS_MISTRAL);
    detect_fmt("tools_deepseek3", FT_TOOLS_DEEPSEEK);
    detect_fmt("tools_llama3_1", FT_TOOLS_LLAMA3);
    detect_fmt("tools_llama3_2", FT_TOOLS_LLAMA3);
    detect_fmt("tools_qwen3_coder", FT_TOOLS_QWEN3_CODER);
    detect_fmt("tools_glm4_6", FT_TOOLS_GLM);
    detect_fmt("tools_glm4_7", FT_TOOLS_GLM);
    detect_fmt("tools_minimax_m2", FT_TOOLS_MINIMAX);
    detect_fmt("tools_harmony", FT_TOOLS_HARMONY);
    detect_fmt("tools_kimi_k2", FT_TOOLS_KIMI);
}

/* What a template writes for an assistant's calls is what its format's parser reads back (the
 * model learns to answer in the form its template shows it). */
static void calls_round_trip(const char *family, enum ft_tool_fmt fmt) {
    struct ft_chat_template *t = NULL;
    EXPECT_OK(ft_chat_template_detect(NULL, family, &t));
    /* Kimi writes the call's id, not its name: the name travels in its functions.NAME:IDX */
    const int kimi = fmt == FT_TOOLS_KIMI;
    const struct ft_chat_tool_call calls[2] = {
        {kimi ? "functions.get_weather:0" : "call00001", "get_weather",
         "{\"city\": \"Z\u00fcrich\", \"days\": 2}"},
        {kimi ? "functions.get_time:1" : "call00002", "get_time", "{}"}};
    struct ft_chat_msg m[2] = {{.role = FT_ROLE_USER, .content = "QUERY-TEXT"},
                               {.role = FT_ROLE_ASSISTANT, .tool_calls = calls, .n_tool_calls = 2}};
    struct ft_chat_opts o = {.enable_thinking = -1,
                             .tools_json = "[{\"type\":\"function\",\"function\":{\"name\":"
                                           "\"get_weather\",\"description\":\"w\",\"parameters\":"
                                           "{\"type\":\"object\",\"properties\":{\"days\":"
                                           "{\"type\":\"integer\"}}}}}]"};
    char *text = NULL;
    EXPECT_OK(ft_chat_render(t, m, 2, &o, &text));
    struct ft_tool_parser p;
    json_t *tools = json_loads(o.tools_json, 0, NULL); /* the XML formats type values by it */
    ft_tool_parser_init(&p, fmt, tools);
    const char *a = text ? strstr(text, "QUERY-TEXT") + 10 : ""; /* the assistant turn */
    ft_tool_parser_push(&p, a, strlen(a));
    ft_tool_parser_finish(&p);
    CHECK_(p.n_calls == 2, "%s: %d calls parsed back from: %s", family, p.n_calls, a);
    if (p.n_calls == 2) {
        EXPECT_STREQ(p.calls[0].name, "get_weather");
        EXPECT_STREQ(p.calls[0].args, "{\"city\":\"Z\u00fcrich\",\"days\":2}");
        EXPECT_STREQ(p.calls[1].name, "get_time");
        EXPECT_STREQ(p.calls[1].args, "{}");
        if (kimi) EXPECT_STREQ(p.calls[1].id, "functions.get_time:1");
    }
    ft_tool_parser_free(&p);
    json_decref(tools);
    free(text);
    ft_chat_template_free(t);
}

TEST(rendered_calls_parse_back) {
    calls_round_trip("qwen2", FT_TOOLS_HERMES);
    calls_round_trip("qwen3", FT_TOOLS_HERMES);
    calls_round_trip("mistral", FT_TOOLS_MISTRAL);
    calls_round_trip("deepseek3", FT_TOOLS_DEEPSEEK);
    calls_round_trip("qwen3_coder", FT_TOOLS_QWEN3_CODER);
    calls_round_trip("glm4", FT_TOOLS_GLM);
    calls_round_trip("minimax", FT_TOOLS_MINIMAX);
    calls_round_trip("kimi_k2", FT_TOOLS_KIMI);
}

/* Python's json.dumps text (the templates' tojson), including float repr */
TEST(tojson_is_python) {
    static const char *const cases[][2] = {
        {"{\"a\":1,\"b\":[true,null,\"x\"]}", "{\"a\": 1, \"b\": [true, null, \"x\"]}"},
        {"[1.0, 0.5, 1e20, 1.5e-7, 123456789.25, -0.0001, 3.14159]",
         "[1.0, 0.5, 1e+20, 1.5e-07, 123456789.25, -0.0001, 3.14159]"},
        {"\"tab\\t \\u0001 \\\"q\\\" \u00fc\"", "\"tab\\t \\u0001 \\\"q\\\" \u00fc\""},
        {"{}", "{}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = ft_chat_tojson(cases[i][0]);
        EXPECT_STREQ(got, cases[i][1]);
        free(got);
    }
    EXPECT(ft_chat_tojson("{bad") == NULL);
}

/* families whose renderer has no tool support refuse tools instead of dropping them */
TEST(tools_refused_where_unsupported) {
    struct ft_chat_template *t = NULL;
    EXPECT_OK(ft_chat_template_detect(NULL, "llama3", &t));
    struct ft_chat_msg m = {.role = FT_ROLE_USER, .content = "hi"};
    struct ft_chat_opts o = {.add_generation_prompt = 1, .enable_thinking = -1,
                             .tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"};
    char *out = NULL;
    EXPECT_EQ(ft_chat_render(t, &m, 1, &o, &out), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "llama3");
    EXPECT(!ft_chat_supports_tools(t));
    ft_chat_template_free(t);
    EXPECT_OK(ft_chat_template_detect(NULL, "qwen2", &t));
    EXPECT(ft_chat_supports_tools(t));
    ft_chat_template_free(t);
}

TEST(qwen3_matches_transformers) {
    EXPECT(run_family("qwen3") >= 90);
}
TEST(llama3_matches_transformers) {
    EXPECT(run_family("llama3") >= 30);
}
TEST(llama2_matches_transformers) {
    EXPECT(run_family("llama2") >= 30);
}
TEST(mistral_matches_transformers) {
    EXPECT(run_family("mistral") >= 30);
}
TEST(mistral_v01_matches_transformers) {
    EXPECT(run_file("mistral_v01", "mistral") >= 30);
}
TEST(deepseek3_matches_transformers) {
    EXPECT(run_family("deepseek3") >= 30);
}
TEST(harmony_matches_transformers) {
    EXPECT(run_family("harmony") >= 30);
}
TEST(chatml_matches_transformers) {
    EXPECT(run_family("chatml") >= 30);
}
TEST(qwen2_matches_transformers) {
    EXPECT(run_family("qwen2") >= 30);
}

/* The template files stored under tests/data/chat are recognised as their family. */
static void detect_file(const char *rel, const char *want) {
    char path[512], *text = NULL;
    size_t size = 0;
    snprintf(path, sizeof path, "%s/chat/%s", FT_TEST_DATA, rel);
    EXPECT_OK(ft_file_read(path, &text, &size));
    if (!text) return;
    const char *src = text;
    json_t *cfg = NULL;
    if (strstr(rel, ".json")) {
        json_error_t e;
        cfg = json_loads(text, 0, &e);
        src = str_or_null(cfg, "chat_template");
    }
    struct ft_chat_template *t = NULL;
    EXPECT_OK(ft_chat_template_detect(src, NULL, &t));
    EXPECT_STREQ(ft_chat_template_name(t), want);
    ft_chat_template_free(t);
    json_decref(cfg);
    free(text);
}

TEST(detects_stored_template_files) {
    detect_file("gpt_oss/chat_template.jinja", "harmony");
    detect_file("llama2/tokenizer_config.json", "llama2");
    detect_file("mistral/tokenizer_config.json", "mistral");
    detect_file("mistral_v01/tokenizer_config.json", "mistral");
    detect_file("chatml/tokenizer_config.json", "chatml");
    detect_file("qwen2/tokenizer_config.json", "qwen2");
    detect_file("llama3_1/chat_template.jinja", "llama3_1");
    detect_file("llama3_2/chat_template.jinja", "llama3_1");
    detect_file("qwen3_coder/chat_template.jinja", "qwen3_coder");
    detect_file("glm4_6/chat_template.jinja", "glm4");
    detect_file("glm4_7/chat_template.jinja", "glm4");
    detect_file("minimax_m2/chat_template.jinja", "minimax");
    detect_file("kimi_k2/chat_template.jinja", "kimi_k2");
}

TEST(unrecognised_template_lists_names) {
    struct ft_chat_template *t = (struct ft_chat_template *)1;
    EXPECT_EQ(ft_chat_template_detect("{{ messages[0]['content'] }}", NULL, &t),
              FT_ERR_UNSUPPORTED);
    EXPECT(t == NULL);
    EXPECT_CONTAINS(ft_error(), ft_chat_template_names());
    EXPECT_CONTAINS(ft_error(), "--chat-template NAME");
    EXPECT(strchr(ft_error(), '\n') == NULL);
    EXPECT_EQ(ft_chat_template_detect(NULL, NULL, &t), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "--chat-template");
    /* a Llama-3.1 template is a near miss: named, not silently rendered as Llama-3 */
    EXPECT_EQ(ft_chat_template_detect("<|start_header_id|> Cutting Knowledge Date", NULL, &t),
              FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "Llama-3.1");
}

TEST(override_names) {
    struct ft_chat_template *t = NULL;
    EXPECT_EQ(ft_chat_template_detect("whatever", "vicuna", &t), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "'vicuna'");
    EXPECT_CONTAINS(ft_error(), ft_chat_template_names());
    const char *names[] = {"chatml",  "qwen3",     "llama3",  "llama2", "mistral",
                           "deepseek3", "harmony", "qwen2", "kimi_k2"};
    for (int i = 0; i < 9; i++) {
        EXPECT_OK(ft_chat_template_detect(NULL, names[i], &t));
        EXPECT_STREQ(ft_chat_template_name(t), names[i]);
        struct ft_chat_msg m = {.role = FT_ROLE_USER, .content = "hi"};
        struct ft_chat_opts o = {.add_generation_prompt = 1, .enable_thinking = -1, .bos_token = "<s>",
                                 .eos_token = "</s>", .date = "2025-01-01"};
        char *out = NULL;
        EXPECT_OK(ft_chat_render(t, &m, 1, &o, &out));
        EXPECT_CONTAINS(out, "hi");
        free(out);
        ft_chat_template_free(t);
    }
    /* an override wins over what the template looks like */
    EXPECT_OK(ft_chat_template_detect("<|im_start|>", "llama3", &t));
    EXPECT_STREQ(ft_chat_template_name(t), "llama3");
    ft_chat_template_free(t);
}

TEST(bad_render_arguments) {
    struct ft_chat_template *t = NULL;
    char *out = (char *)1;
    EXPECT_OK(ft_chat_template_detect(NULL, "qwen3", &t));
    EXPECT_EQ(ft_chat_render(t, NULL, 0, NULL, &out), FT_ERR_INVALID_ARG);
    EXPECT(out == NULL);
    /* NULL options and NULL content are allowed */
    struct ft_chat_msg m = {.role = FT_ROLE_USER};
    EXPECT_OK(ft_chat_render(t, &m, 1, NULL, &out));
    EXPECT_STREQ(out, "<|im_start|>user\n<|im_end|>\n");
    free(out);
    ft_chat_template_free(t);
    ft_chat_template_free(NULL);
}

TEST(harmony_options) {
    struct ft_chat_template *t = NULL;
    EXPECT_OK(ft_chat_template_detect(NULL, "harmony", &t));
    struct ft_chat_msg m = {.role = FT_ROLE_USER, .content = "hi"};
    struct ft_chat_opts o = {
        .add_generation_prompt = 1, .enable_thinking = -1, .reasoning_effort = "high"};
    char *out = NULL;
    EXPECT_OK(ft_chat_render(t, &m, 1, &o, &out));
    EXPECT_CONTAINS(out, "Reasoning: high\n\n");
    EXPECT_CONTAINS(out, "Current date: 20"); /* today's date when none is given */
    free(out);
    ft_chat_template_free(t);
}

TEST_MAIN("chat")
