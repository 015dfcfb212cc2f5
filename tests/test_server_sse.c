/* test_server_sse.c — the <think> splitter of server/sse.c fed whole and byte by byte (tags split
 * across stream chunks), and SSE framing. */
#include <string.h>

#include "server/sse.h"
#include "test.h"
/* the terminal's harmony wrapper (ft run / ft chat) is tested in-process */
#include "cli/opts.c"

/* Feeds text in pieces of `step` bytes (0 = whole) and returns reasoning|content; in_think 2:
 * harmony. */
static void split(const char *text, int in_think, size_t step, char *out, size_t cap) {
    struct ft_think t;
    struct ft_sbuf r = {0}, c = {0};
    ft_think_init(&t, in_think == 1, in_think == 2);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step ? step : n)
        ft_think_push(&t, text + i, step && n - i > step ? step : n - i, &r, &c);
    ft_think_flush(&t, &r, &c);
    snprintf(out, cap, "%s|%s", r.p ? r.p : "", c.p ? c.p : "");
    ft_sbuf_free(&r);
    ft_sbuf_free(&c);
    ft_think_free(&t);
}

static void expect_split(const char *text, int in_think, const char *want) {
    char got[512];
    for (size_t step = 0; step <= 5; step++) {
        split(text, in_think, step, got, sizeof got);
        CHECK_(!strcmp(got, want), "split(%s, step %zu) = '%s', want '%s'", text, step, got, want);
    }
}

TEST(think_split_cases) {
    expect_split("<think>\nplan it\n</think>\n\nThe answer.", 0, "\nplan it\n|The answer.");
    expect_split("  <think>a</think>b", 0, "a|b");
    expect_split("No thinking here <think>x</think>", 0, "|No thinking here <think>x</think>");
    expect_split("<thin", 0, "|<thin");              /* an unfinished tag at the end is text */
    expect_split("still thinking", 1, "still thinking|"); /* prompt opened <think> */
    expect_split("r1 style</think>\n\nok", 1, "r1 style|ok");
    expect_split("<think>unclosed </thi", 0, "unclosed </thi|");
    expect_split("<", 0, "|<");
    expect_split("", 0, "|");
}

/* gpt-oss harmony output (what follows the prompt's "<|start|>assistant"), as the tokens'
 * text: the analysis channel is reasoning, final and commentary are content. */
TEST(harmony_split_cases) {
    expect_split("<|channel|>analysis<|message|>User asks. Answer 4.<|end|><|start|>assistant"
                 "<|channel|>final<|message|>2 + 2 = 4.<|return|>",
                 2, "User asks. Answer 4.|2 + 2 = 4.");
    expect_split("<|channel|>final<|message|>Just the answer.", 2, "|Just the answer.");
    expect_split("<|channel|>analysis<|message|>still thinking <|", 2, "still thinking <||");
    /* a message to a function goes on whole, for the harmony tool-call parser */
    expect_split("<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"a\": 1}<|call|>",
                 2, "|<|start|>assistant<|channel|>commentary to=functions.get <|constrain|>json"
                 "<|message|>{\"a\": 1}<|call|>");
    expect_split("<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant to=functions.f"
                 "<|channel|>commentary json<|message|>{}", /* <|call|> was the stop token */
                 2, "Need it.|<|start|>assistant<|start|>assistant to=functions.f<|channel|>"
                 "commentary json<|message|>{}<|call|>");
    expect_split(" to=functions.f<|channel|>commentary json<|message|>{}<|call|>", 2,
                 "|<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>");
    expect_split("<|channel|>commentary<|message|>Checking.<|end|>", 2, "|Checking."); /* preamble */
    expect_split("to", 2, "|to");
    expect_split("no header at all", 2, "|no header at all");
    expect_split("<html>short</html>", 2, "|<html>short</html>"); /* '<' but no marker */
    expect_split("<", 2, "|<");
    expect_split("<|channel|>analysis<|message|>x<|end|>\n<|start|>assistant<|channel|>final<|message|>y",
                 2, "x|y"); /* whitespace between messages */
    expect_split("<|channel|>analysis<|message|>a < b and c|>d<|end|>", 2, "a < b and c|>d|");
    expect_split("<|channel|>analy", 2, "|"); /* cut inside the header: nothing to show */
    expect_split("", 2, "|");
}

static int collect_inner(void *ctx, const char *s, size_t n) {
    return ft_sbuf_add(ctx, s, n);
}

/* ft run / ft chat: harmony's final channel reaches the emit callback (analysis goes to stderr);
 * any other template passes text through and keeps skipping special tokens. */
TEST(cli_harmony_wrapper) {
    static const char text[] = "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
                               "<|channel|>final<|message|>The answer.";
    for (int h = 0; h < 2; h++) {
        struct ft_gen_params p = {0};
        struct ft_sbuf got = {0};
        struct ft_cli_harmony w;
        ft_cli_harmony_begin(&w, h ? "harmony" : "chatml", &p, collect_inner, &got);
        EXPECT_EQ(p.keep_special, h);
        for (size_t i = 0; i < sizeof text - 1; i += 3)
            EXPECT_EQ(ft_cli_harmony_emit(&w, text + i, sizeof text - 1 - i < 3 ? sizeof text - 1 - i : 3), 0);
        ft_cli_harmony_end(&w);
        EXPECT_STREQ(got.p ? got.p : "", h ? "The answer." : text);
        ft_sbuf_free(&got);
    }
}

TEST(sse_framing) {
    struct ft_sbuf b = {0};
    EXPECT_EQ(ft_sse_json(&b, json_pack("{s:s}", "a", "x\ny")), 0);
    EXPECT_STREQ(b.p, "data: {\"a\":\"x\\ny\"}\n\n");
    ft_sbuf_free(&b);
}

TEST_MAIN("server_sse")
