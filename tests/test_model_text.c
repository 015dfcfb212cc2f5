/* test_model_text.c — text in, text out on the qwen3_moe fixture (tiny real tokenizer + Qwen3's
 * chat template): `ft run -p`, `ft run --chat` and an interactive `ft chat` driven in a real
 * terminal (tmux send-keys / capture-pane) must print exactly what transformers generates
 * (tests/data/models/qwen3_moe/text_reference.json, tools/gen_text_refs.py), with exact fp32
 * activations (--cpu-act f32: the random tiny model's top logits nearly tie, so the default
 * bf16 rounding of activations would change its greedy text). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "test.h"

#define M FT_TEST_DATA "/models/qwen3_moe"

static json_t *g_ref;

static const char *ref_text(int i) { return json_string_value(json_object_get(json_array_get(g_ref, (size_t)i), "text")); }

/* Runs a shell command, returns its stdout (malloc'd). */
static char *capture(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    pclose(p);
    return buf;
}

static void load_ref(void) {
    if (!g_ref) g_ref = json_load_file(M "/text_reference.json", 0, NULL);
}

TEST(run_raw_prompt_matches_transformers) {
    load_ref();
    EXPECT(g_ref != NULL);
    for (int i = 0; i < 2; i++) {
        json_t *c = json_array_get(g_ref, (size_t)i);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -p '%s' --temp 0 -n %d -t 1 --cpu-act f32 2>/dev/null",
                 FT_BIN, M, json_string_value(json_object_get(c, "prompt")),
                 (int)json_integer_value(json_object_get(c, "n")));
        char *out = capture(cmd);
        EXPECT_STREQ(out, ref_text(i));
        free(out);
    }
}

TEST(run_chat_matches_transformers) {
    load_ref();
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --chat -p Hello --temp 0 -n 10 -t 1 --cpu-act f32 2>/dev/null",
             FT_BIN, M);
    char *out = capture(cmd);
    EXPECT_STREQ(out, ref_text(2));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --chat --system 'Be brief.' --no-think "
             "-p 'How are you today?' --temp 0 -n 10 -t 1 --cpu-act f32 2>/dev/null", FT_BIN, M);
    out = capture(cmd);
    EXPECT_STREQ(out, ref_text(3));
    free(out);
}

TEST(stop_string_truncates) {
    load_ref();
    /* stop at the first "ick" of the reference continuation: output is what comes before */
    const char *full = ref_text(0);
    const char *at = full ? strstr(full, "ick") : NULL;
    EXPECT(at != NULL);
    if (!at) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -p 'Once upon a time' --temp 0 -n 12 -t 1 --cpu-act f32 --stop ick 2>/dev/null",
             FT_BIN, M);
    char *out = capture(cmd);
    EXPECT(out && strlen(out) == (size_t)(at - full) && !strncmp(out, full, (size_t)(at - full)));
    free(out);
}

/* A value that looks like a sampling flag is a value: '--system --temp' leaves sampling alone. */
TEST(flag_like_values_stay_values) {
    load_ref();
    json_t *c = json_array_get(g_ref, 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -p '%s' --temp 0 -n %d -t 1 --cpu-act f32 --system --temp 2>&1 >/dev/null",
             FT_BIN, M, json_string_value(json_object_get(c, "prompt")), (int)json_integer_value(json_object_get(c, "n")));
    char *err = capture(cmd);
    EXPECT(err && !strstr(err, "not a number"));
    free(err);
    cmd[strlen(cmd) - strlen(" 2>&1 >/dev/null")] = 0;
    strcat(cmd, " 2>/dev/null");
    char *out = capture(cmd);
    EXPECT_STREQ(out, ref_text(0));
    free(out);
}

TEST(bad_prompts_are_clear_errors) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -p \"$(printf 'bad \\377 utf8')\" -n 2 2>&1 >/dev/null", FT_BIN, M);
    char *out = capture(cmd);
    EXPECT_CONTAINS(out, "UTF-8");
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -p '' -n 2 2>&1 >/dev/null", FT_BIN, M);
    out = capture(cmd);
    EXPECT_CONTAINS(out, "empty");
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -p \"$(head -c 3000 /dev/zero | tr '\\0' a)\" -c 64 -n 2 2>&1 >/dev/null",
             FT_BIN, M);
    out = capture(cmd);
    EXPECT_CONTAINS(out, "context");
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --chat --chat-template nosuch -p hi 2>&1 >/dev/null", FT_BIN, M);
    out = capture(cmd);
    EXPECT_CONTAINS(out, "chatml");
    free(out);
}

/* --- ft chat in a real terminal --- */

static char g_sess[64];

/* Each test talks to its own tmux server (-L socket): a server exiting after the previous test's
 * last session was killed cannot race the next test's new-session. */
static void tmux(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "tmux -L %s %s >/dev/null 2>&1", g_sess, args);
    if (system(cmd) != 0) fprintf(stderr, "  (tmux %s failed)\n", args);
}

static char *pane(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -J -S -200 -t %s", g_sess, g_sess);
    return capture(cmd);
}

/* Waits until the pane shows `n` prompts ("> " at a line start), up to 20 s. */
static int wait_prompts(int n) {
    for (int i = 0; i < 400; i++) {
        char *p = pane();
        int k = 0;
        for (char *s = p; s && (s = strstr(s, "> ")); s += 2) k += s == p || s[-1] == '\n';
        free(p);
        if (k >= n) return 1;
        usleep(50000);
    }
    return 0;
}

static void send_line(const char *text) {
    char args[512];
    snprintf(args, sizeof args, "send-keys -t %s -l '%s'", g_sess, text);
    tmux(args);
    snprintf(args, sizeof args, "send-keys -t %s Enter", g_sess);
    tmux(args);
}

TEST(chat_in_a_terminal) {
    load_ref();
    if (system("command -v tmux >/dev/null") != 0) {
        CHECK_(0, "tmux is not installed (tools/setup.sh installs it)");
        return;
    }
    snprintf(g_sess, sizeof g_sess, "ftchat%d", (int)getpid());
    char args[1024];
    snprintf(args, sizeof args, "new-session -d -s %s -x 200 -y 50 \"FT_TEST_SLOW_EMIT_MS=0 '%s' chat "
             "--model '%s' --temp 0 -n 10 -t 1 --cpu-act f32 2>/dev/null; echo CHAT-EXITED; sleep 30\"", g_sess, FT_BIN, M);
    tmux(args);
    EXPECT(wait_prompts(1));
    send_line("Hello");
    EXPECT(wait_prompts(2));
    send_line("Tell me more"); /* second turn: history + KV prefix reuse */
    EXPECT(wait_prompts(3));
    char *p = pane();
    EXPECT_CONTAINS(p, ref_text(2));
    EXPECT_CONTAINS(p, ref_text(4));
    free(p);
    send_line("/reset");
    send_line("Hello");
    EXPECT(wait_prompts(5));
    p = pane();
    char *second = p ? strstr(p, "(history cleared)") : NULL;
    EXPECT(second && strstr(second, ref_text(2)));
    free(p);
    send_line("/exit");
    int exited = 0;
    for (int i = 0; i < 100 && !exited; i++) {
        p = pane();
        exited = p && strstr(p, "CHAT-EXITED");
        free(p);
        usleep(50000);
    }
    EXPECT(exited);
    snprintf(args, sizeof args, "kill-session -t %s", g_sess);
    tmux(args);
}

TEST(chat_ctrl_c_stops_the_answer) {
    snprintf(g_sess, sizeof g_sess, "ftchatc%d", (int)getpid());
    char args[1024];
    /* slow the stream (FT_TESTING hook) so Ctrl-C lands mid-answer */
    snprintf(args, sizeof args, "new-session -d -s %s -x 200 -y 50 \"FT_TEST_SLOW_EMIT_MS=100 '%s' chat "
             "--model '%s' --temp 0 -n 200 --ignore-eos -t 1 --cpu-act f32 2>/dev/null; echo CHAT-EXITED; sleep 30\"",
             g_sess, FT_BIN, M);
    tmux(args);
    EXPECT(wait_prompts(1));
    send_line("Hello");
    usleep(600000);
    snprintf(args, sizeof args, "send-keys -t %s C-c", g_sess);
    tmux(args);
    EXPECT(wait_prompts(2)); /* back at the prompt, still running */
    char *p = pane();
    EXPECT_CONTAINS(p, "[stopped]");
    EXPECT(p && !strstr(p, "CHAT-EXITED"));
    free(p);
    send_line("/exit");
    usleep(300000);
    snprintf(args, sizeof args, "kill-session -t %s", g_sess);
    tmux(args);
}

TEST_MAIN("model_text")
