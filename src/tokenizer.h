/*
GPT-2 tokenizer, decode only, CUDA-free. Reads llm.c's gpt2_tokenizer.bin: uint32 header[256]
(magic 20240328, version 1 or 2, n tokens, EOT id in version 2), then per token one uint8
length (1..255) and that many raw bytes. Enough to print samples; encoding is not needed.
*/
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <string>
#include "utils.h"

#define TOKENIZER_MAGIC 20240328

typedef struct {
    uint32_t vocab_size;
    char** token_table;  // (vocab_size) zero-terminated byte strings
    int init_ok;
    int eot_token;
} Tokenizer;

inline std::string tokenizer_init(Tokenizer* tok, const char* path) {
    tok->vocab_size = 0;
    tok->token_table = nullptr;
    tok->init_ok = 0;
    tok->eot_token = 50256;
    FILE* fp = fopen(path, "rb");
    if (fp == nullptr) return strfmt("tokenizer file '%s' could not be opened: %s", path, strerror(errno));
    uint32_t header[256];
    if (fread(header, sizeof(uint32_t), 256, fp) != 256) { fclose(fp); return strfmt("tokenizer file '%s' is truncated (no full header)", path); }
    if (header[0] != TOKENIZER_MAGIC) { fclose(fp); return strfmt("tokenizer file '%s' has bad magic %u (expected %d)", path, header[0], TOKENIZER_MAGIC); }
    if (header[1] != 1 && header[1] != 2) { fclose(fp); return strfmt("tokenizer file '%s' has unsupported version %u", path, header[1]); }
    tok->vocab_size = header[2];
    if (header[1] == 2) tok->eot_token = (int)header[3];
    tok->token_table = (char**)calloc(tok->vocab_size, sizeof(char*));
    for (uint32_t i = 0; i < tok->vocab_size; i++) {
        unsigned char length;
        if (fread(&length, 1, 1, fp) != 1 || length == 0) {
            fclose(fp);
            for (uint32_t j = 0; j < i; j++) free(tok->token_table[j]);
            free(tok->token_table);
            tok->token_table = nullptr;
            return strfmt("tokenizer file '%s' is truncated or corrupt at token %u", path, i);
        }
        char* s = (char*)mallocCheck(length + 1);
        if (fread(s, 1, length, fp) != length) {
            free(s);
            fclose(fp);
            for (uint32_t j = 0; j < i; j++) free(tok->token_table[j]);
            free(tok->token_table);
            tok->token_table = nullptr;
            return strfmt("tokenizer file '%s' is truncated at token %u", path, i);
        }
        s[length] = '\0';
        tok->token_table[i] = s;
    }
    fclose(fp);
    tok->init_ok = 1;
    return "";
}

// the bytes of one token (not necessarily valid UTF-8 on their own); nullptr for a bad id
inline const char* tokenizer_decode(const Tokenizer* tok, uint32_t token_id) {
    if (!tok->init_ok || token_id >= tok->vocab_size) return nullptr;
    return tok->token_table[token_id];
}

// prints a token, skipping lone control bytes that would garble the terminal
inline void safe_printf(const char* piece) {
    if (piece == nullptr || piece[0] == '\0') return;
    if (piece[1] == '\0') {
        unsigned char byte = (unsigned char)piece[0];
        if (!(isprint(byte) || isspace(byte))) return;
    }
    printf("%s", piece);
}

inline void tokenizer_free(Tokenizer* tok) {
    if (tok->token_table) {
        for (uint32_t i = 0; i < tok->vocab_size; i++) free(tok->token_table[i]);
        free(tok->token_table);
    }
    tok->token_table = nullptr;
    tok->init_ok = 0;
}
