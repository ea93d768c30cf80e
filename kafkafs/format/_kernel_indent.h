/* Compact JSON laid out with a step per level: jsonembed.indent_json, compiled.
 *
 * The reference splits its input with one regular expression, taken by findall (a character that
 * starts no token is skipped):
 *   "(?:[^"\\]|\\.)*"   a string, escapes kept as written (a string left open is no token)
 *   [{}\[\],:]          one punctuation character
 *   [^{}\[\],:"]+       a run of anything else (numbers, literals, whitespace)
 * and lays the tokens out as json.dumps(indent=...) would: an empty object or array stays "{}" / "[]",
 * a depth below zero indents by nothing. The output is the reference's, byte for byte, for any input
 * (tests/format/test_kernel_differential.py). */
#ifndef KAFKAFS_KERNEL_INDENT_H
#define KAFKAFS_KERNEL_INDENT_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_text.h"

enum { TOK_NONE, TOK_STRING, TOK_PUNCT, TOK_OTHER };

static int indent_is_punct(unsigned char c) {
    return c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':';
}

/* The next token at or after *pos: its kind, and [*start, *end); TOK_NONE at the end of the input. */
static int indent_next(const unsigned char *s, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t *start, Py_ssize_t *end) {
    while (pos < n) {
        unsigned char c = s[pos];
        if (c == '"') {
            Py_ssize_t q = pos + 1;
            while (q < n) {
                if (s[q] == '"') {
                    *start = pos;
                    *end = q + 1;
                    return TOK_STRING;
                }
                if (s[q] == '\\') {
                    if (q + 1 >= n) break;
                    q += 2;
                } else {
                    q++;
                }
            }
            pos++; /* a string left open: the quote starts no token */
            continue;
        }
        *start = pos;
        if (indent_is_punct(c)) {
            *end = pos + 1;
            return TOK_PUNCT;
        }
        Py_ssize_t q = pos + 1;
        while (q < n && s[q] != '"' && !indent_is_punct(s[q])) q++;
        *end = q;
        return TOK_OTHER;
    }
    return TOK_NONE;
}

/* A new line and the step ``depth`` times (nothing when the depth is below zero). Output: _kernel_text.h's Out. */
static int indent_line(Out *o, const char *step, Py_ssize_t step_len, Py_ssize_t depth) {
    if (out_byte(o, '\n') < 0) return -1;
    for (Py_ssize_t i = 0; i < depth; i++)
        if (out_write(o, step, step_len) < 0) return -1;
    return 0;
}

#endif /* KAFKAFS_KERNEL_INDENT_H */
