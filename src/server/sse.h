/* sse.h — small helpers for streamed responses: a growable byte buffer, Server-Sent-Events
 * framing ("data: {json}\n\n"), and the incremental <think>...</think> splitter that routes a
 * reasoning model's thinking to reasoning_content and the rest to content.
 * Used by server/openai.c. Threading: each object belongs to one request (one thread). */
#ifndef FT_SERVER_SSE_H
#define FT_SERVER_SSE_H

#include <stddef.h>

#include <jansson.h>

struct ft_sbuf {
    char *p;     /* NUL-terminated when non-NULL */
    size_t n, cap;
};
/* Appends n bytes; returns 0, or -1 when out of memory (the buffer is unchanged). */
int ft_sbuf_add(struct ft_sbuf *b, const char *s, size_t n);
void ft_sbuf_free(struct ft_sbuf *b);

/* Appends "data: <compact json>\n\n" (and takes the reference to j). */
int ft_sse_json(struct ft_sbuf *b, json_t *j);

enum ft_think_state { FT_THINK_START, FT_THINK_IN, FT_THINK_AFTER, FT_THINK_CONTENT,
                      FT_HARMONY_HEADER, FT_HARMONY_BODY };

struct ft_think {
    enum ft_think_state state;
    struct ft_sbuf hold; /* bytes that may still be part of a tag (harmony: of a header) */
    int analysis;        /* harmony: the current message is on the analysis channel */
    int call;            /* harmony: the current message is addressed to a function */
};
/* in_think: the prompt already opened the thinking block (it ends with "<think>"); harmony: the
 * model writes harmony messages (gpt-oss), with special tokens kept in the text. */
void ft_think_init(struct ft_think *t, int in_think, int harmony);
/* Splits streamed text: reasoning bytes go to r, answer bytes to c (both appended). A leading
 * "<think>" (after whitespace) opens the reasoning, "</think>" closes it; the newlines right after
 * it are dropped. Harmony: each message is "[<|start|>role]<|channel|>NAME[...]<|message|>body"
 * ended by <|end|>, <|return|> or <|call|>; bodies on the analysis channel are reasoning, the
 * others (final, commentary) content; the markers and headers are dropped, except for a
 * message addressed to a function ("to=functions.NAME" in its header): that one goes to content
 * whole, as "<|start|>assistant" HEADER "<|message|>" BODY "<|call|>", for the harmony tool-call
 * parser. Text before any header is content. */
void ft_think_push(struct ft_think *t, const char *s, size_t n, struct ft_sbuf *r, struct ft_sbuf *c);
/* End of stream: releases what is held. */
void ft_think_flush(struct ft_think *t, struct ft_sbuf *r, struct ft_sbuf *c);
void ft_think_free(struct ft_think *t);

#endif
