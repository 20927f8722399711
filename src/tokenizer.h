/*
GPT-2 tokenizer, CUDA-free: decodes token ids to bytes and encodes UTF-8 text to token ids. The encoder is
byte-exact with tiktoken's GPT-2 encoding (r50k_base) called as encode_ordinary.

Either of two files gives the same tokenizer:
- tokenizer_init reads llm.c's gpt2_tokenizer.bin: uint32 header[256] (magic 20240328, version 1 or 2, n tokens,
  EOT id in version 2, else 50256), then per token one uint8 length (1..255) and that many raw bytes. Every token
  but EOT is a BPE token whose rank is its id.
- tokenizer_init_tiktoken reads a tiktoken rank file such as gpt2.tiktoken: one "base64(token bytes) rank" per line,
  ranks 0..n-1 once each. A token's id is its rank; EOT gets id n (50256 for GPT-2) and the bytes "<|endoftext|>".

tokenizer_encode does GPT-2's two steps:
1. Pre-tokenize: cut the text into pieces with GPT-2's pattern
       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   by a hand-written matcher (tokenizer_piece_end; std::regex has no \p{L}) over UTF-8, with the classes of
   src/unicode_tables.h (\p{L} = L*, \p{N} = N*, \s = White_Space, as in tiktoken's Rust regex and Python's regex).
   A byte that does not start a valid UTF-8 sequence (bad lead or continuation byte, truncated, overlong, surrogate,
   above U+10FFFF) is one character of class other, the class of the U+FFFD that decoding the text with
   errors="replace" puts there, so the pieces' boundaries are tiktoken's for that decoded text. The byte itself is
   kept (not replaced), so decoding the ids gives back the input bytes exactly. A code point assigned after the
   Unicode version of the table (src/unicode_tables.h names it) is other here, where tiktoken's newer tables may
   see a letter or number; scripts/gen_unicode_tables.py --from_regex takes the regex module's newer data instead.
2. Merge, in each piece: start from single bytes and merge the adjacent pair whose concatenation has the lowest rank
   (the leftmost one if the same pair occurs twice) until no adjacent pair is a token; each part's rank is its id.
   Each merge scans the piece's pairs, so a piece of n bytes costs up to O(n^2) lookups, as in tiktoken; real text
   has short pieces, and a piece that is one token costs one lookup.
No special tokens are parsed inside the text; a caller that wants <|endoftext|> appends tok->eot_token itself.
*/
#pragma once
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <string>
#include <vector>
#include "utils.h"
#include "unicode_tables.h"

#define TOKENIZER_MAGIC 20240328

typedef struct {
    uint32_t vocab_size;
    int init_ok;
    int eot_token;
    char* token_bytes;       // every token's bytes back to back, each followed by a '\0' for tokenizer_decode
    uint32_t* token_offset;  // (vocab_size + 1) token i starts at token_bytes[token_offset[i]]; its length is
                             // token_offset[i + 1] - token_offset[i] - 1
    int32_t* rank_slots;     // (rank_mask + 1) open-addressing hash table of token ids keyed by their bytes, every
                             // token but EOT, -1 = empty slot; a token's rank is its id
    uint32_t rank_mask;      // number of slots - 1 (a power of two - 1)
} Tokenizer;

// ----------------------------------------------------------------------------
// loading

inline void tokenizer_zero(Tokenizer* tok) {
    tok->vocab_size = 0;
    tok->init_ok = 0;
    tok->eot_token = 50256;
    tok->token_bytes = nullptr;
    tok->token_offset = nullptr;
    tok->rank_slots = nullptr;
    tok->rank_mask = 0;
}

// FNV-1a: a token is a few bytes, so a simple byte-wise hash is enough
inline uint32_t tokenizer_hash(const unsigned char* s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

// the id (= rank) of the token with bytes s[0..n), or -1 if there is none
inline int tokenizer_rank(const Tokenizer* tok, const unsigned char* s, size_t n) {
    for (uint32_t slot = tokenizer_hash(s, n) & tok->rank_mask;; slot = (slot + 1) & tok->rank_mask) {
        int32_t id = tok->rank_slots[slot];
        if (id < 0) return -1;
        uint32_t off = tok->token_offset[id];
        if (tok->token_offset[id + 1] - off - 1 == n && memcmp(tok->token_bytes + off, s, n) == 0) return id;
    }
}

// takes the decode table built by a loader (bytes: each token followed by '\0'; offsets: vocab_size + 1 entries)
// and builds the rank table over every token but EOT; of two tokens with the same bytes the lower id wins
inline std::string tokenizer_build(Tokenizer* tok, const std::vector<char>& bytes, const std::vector<uint32_t>& offsets) {
    tok->vocab_size = (uint32_t)offsets.size() - 1;
    tok->token_bytes = (char*)mallocCheck(bytes.size());
    memcpy(tok->token_bytes, bytes.data(), bytes.size());
    tok->token_offset = (uint32_t*)mallocCheck(offsets.size() * sizeof(uint32_t));
    memcpy(tok->token_offset, offsets.data(), offsets.size() * sizeof(uint32_t));
    uint32_t num_slots = 16;
    while (num_slots < 2 * tok->vocab_size) num_slots *= 2;  // at most half full, so probes stay short
    tok->rank_mask = num_slots - 1;
    tok->rank_slots = (int32_t*)mallocCheck(num_slots * sizeof(int32_t));
    for (uint32_t i = 0; i < num_slots; i++) tok->rank_slots[i] = -1;
    for (uint32_t id = 0; id < tok->vocab_size; id++) {
        if ((int)id == tok->eot_token) continue;
        const unsigned char* s = (const unsigned char*)tok->token_bytes + tok->token_offset[id];
        size_t n = tok->token_offset[id + 1] - tok->token_offset[id] - 1;
        if (tokenizer_rank(tok, s, n) >= 0) continue;
        uint32_t slot = tokenizer_hash(s, n) & tok->rank_mask;
        while (tok->rank_slots[slot] >= 0) slot = (slot + 1) & tok->rank_mask;
        tok->rank_slots[slot] = (int32_t)id;
    }
    tok->init_ok = 1;
    return "";
}

// reads a whole file into *data; "" or why not
inline std::string tokenizer_read_file(const char* path, const char* what, std::string* data) {
    FILE* fp = fopen(path, "rb");
    if (fp == nullptr) return strfmt("%s '%s' could not be opened: %s", what, path, strerror(errno));
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), fp)) > 0) data->append(buf, got);
    bool failed = ferror(fp) != 0;
    fclose(fp);
    if (failed) return strfmt("%s '%s' could not be read", what, path);
    return "";
}

// llm.c's gpt2_tokenizer.bin
inline std::string tokenizer_init(Tokenizer* tok, const char* path) {
    tokenizer_zero(tok);
    std::string file;
    std::string err = tokenizer_read_file(path, "tokenizer file", &file);
    if (!err.empty()) return err;
    uint32_t header[256];
    if (file.size() < sizeof(header)) return strfmt("tokenizer file '%s' is truncated (no full header)", path);
    memcpy(header, file.data(), sizeof(header));
    if (header[0] != TOKENIZER_MAGIC) return strfmt("tokenizer file '%s' has bad magic %u (expected %d)", path, header[0], TOKENIZER_MAGIC);
    if (header[1] != 1 && header[1] != 2) return strfmt("tokenizer file '%s' has unsupported version %u", path, header[1]);
    uint32_t vocab_size = header[2];
    if (vocab_size == 0) return strfmt("tokenizer file '%s' has no tokens", path);
    if (header[1] == 2) tok->eot_token = (int)header[3];
    std::vector<char> bytes;
    std::vector<uint32_t> offsets = {0};
    size_t pos = sizeof(header);
    for (uint32_t i = 0; i < vocab_size; i++) {
        if (pos >= file.size() || file[pos] == 0) return strfmt("tokenizer file '%s' is truncated or corrupt at token %u", path, i);
        size_t length = (unsigned char)file[pos];
        if (pos + 1 + length > file.size()) return strfmt("tokenizer file '%s' is truncated at token %u", path, i);
        bytes.insert(bytes.end(), file.begin() + pos + 1, file.begin() + pos + 1 + length);
        bytes.push_back('\0');
        offsets.push_back((uint32_t)bytes.size());
        pos += 1 + length;
    }
    return tokenizer_build(tok, bytes, offsets);
}

// value of one base64 digit, or -1
inline int tokenizer_base64_digit(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// standard base64 with '=' padding, appended to *out; false if s[0..n) is not well formed
inline bool tokenizer_base64_decode(const char* s, size_t n, std::string* out) {
    if (n == 0 || n % 4 != 0) return false;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=') {
                if (i + 4 != n || k < 2) return false;  // padding only ends the last group, at most "=="
                pad++;
                v <<= 6;
                continue;
            }
            int d = tokenizer_base64_digit(c);
            if (d < 0 || pad > 0) return false;
            v = (v << 6) | (uint32_t)d;
        }
        out->push_back((char)(v >> 16));
        if (pad < 2) out->push_back((char)((v >> 8) & 0xFF));
        if (pad < 1) out->push_back((char)(v & 0xFF));
    }
    return true;
}

// a tiktoken rank file ("base64(token bytes) rank" per line, ranks 0..n-1 once each); EOT becomes id n
inline std::string tokenizer_init_tiktoken(Tokenizer* tok, const char* path) {
    tokenizer_zero(tok);
    std::string file;
    std::string err = tokenizer_read_file(path, "rank file", &file);
    if (!err.empty()) return err;
    std::vector<std::string> by_rank;  // token bytes by rank; the flags below say which ranks were seen
    std::vector<char> seen;
    size_t pos = 0;
    for (int line = 1; pos < file.size(); line++) {
        size_t eol = file.find('\n', pos);
        if (eol == std::string::npos) eol = file.size();
        size_t a = pos, b;
        pos = eol + 1;
        while (a < eol && isspace((unsigned char)file[a])) a++;
        if (a == eol) continue;  // blank line
        for (b = a; b < eol && !isspace((unsigned char)file[b]); b++) {}
        size_t c = b;
        while (c < eol && isspace((unsigned char)file[c])) c++;
        size_t d = c;
        long long rank = 0;
        while (d < eol && isdigit((unsigned char)file[d]) && rank < INT_MAX) rank = rank * 10 + (file[d++] - '0');
        size_t e = d;
        while (e < eol && isspace((unsigned char)file[e])) e++;
        if (c == b || d == c || e != eol) return strfmt("rank file '%s' line %d: expected \"base64 rank\"", path, line);
        std::string token;
        if (!tokenizer_base64_decode(file.data() + a, b - a, &token) || token.empty())
            return strfmt("rank file '%s' line %d: bad base64 '%s'", path, line, file.substr(a, b - a).c_str());
        if (rank >= (long long)file.size()) return strfmt("rank file '%s' line %d: rank %lld is out of range", path, line, rank);
        if ((size_t)rank >= by_rank.size()) { by_rank.resize(rank + 1); seen.resize(rank + 1, 0); }
        if (seen[rank]) return strfmt("rank file '%s' line %d: rank %lld appears twice", path, line, rank);
        seen[rank] = 1;
        by_rank[rank] = token;
    }
    for (size_t r = 0; r < seen.size(); r++)
        if (!seen[r]) return strfmt("rank file '%s' has no rank %zu (ranks must be 0..n-1 once each)", path, r);
    if (by_rank.empty()) return strfmt("rank file '%s' has no ranks", path);
    tok->eot_token = (int)by_rank.size();
    by_rank.push_back("<|endoftext|>");
    std::vector<char> bytes;
    std::vector<uint32_t> offsets = {0};
    for (const std::string& t : by_rank) {
        bytes.insert(bytes.end(), t.begin(), t.end());
        bytes.push_back('\0');
        offsets.push_back((uint32_t)bytes.size());
    }
    return tokenizer_build(tok, bytes, offsets);
}

inline void tokenizer_free(Tokenizer* tok) {
    free(tok->token_bytes);
    free(tok->token_offset);
    free(tok->rank_slots);
    tokenizer_zero(tok);
}

// ----------------------------------------------------------------------------
// decoding

// the bytes of one token as a C string (not necessarily valid UTF-8 on its own; a token that holds a 0 byte ends
// there, see tokenizer_token_bytes); nullptr for a bad id
inline const char* tokenizer_decode(const Tokenizer* tok, uint32_t token_id) {
    if (!tok->init_ok || token_id >= tok->vocab_size) return nullptr;
    return tok->token_bytes + tok->token_offset[token_id];
}

// the bytes of one token and their count in *length, 0 bytes included; nullptr for a bad id
inline const char* tokenizer_token_bytes(const Tokenizer* tok, uint32_t token_id, size_t* length) {
    if (!tok->init_ok || token_id >= tok->vocab_size) return nullptr;
    *length = tok->token_offset[token_id + 1] - tok->token_offset[token_id] - 1;
    return tok->token_bytes + tok->token_offset[token_id];
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

// ----------------------------------------------------------------------------
// encoding, step 1: GPT-2's pre-tokenizer

// class of a code point: ASCII by table, the rest by binary search over the ranges of src/unicode_tables.h
inline UnicodeClass unicode_class(uint32_t cp) {
    if (cp < 128) return (UnicodeClass)kUnicodeAsciiClass[cp];
    int lo = 0, hi = kUnicodeNumRanges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < kUnicodeRanges[mid].lo) hi = mid - 1;
        else if (cp > kUnicodeRanges[mid].hi) lo = mid + 1;
        else return kUnicodeRanges[mid].cls;
    }
    return kUnicodeOther;
}

// the length in bytes (1..4) of the UTF-8 character at s[0..n), n >= 1, and its class in *cls;
// a byte that does not start a valid sequence is a character of its own, of class other
inline int tokenizer_utf8_char(const unsigned char* s, size_t n, UnicodeClass* cls) {
    unsigned char b0 = s[0];
    if (b0 < 0x80) { *cls = (UnicodeClass)kUnicodeAsciiClass[b0]; return 1; }
    int length;
    uint32_t cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) { length = 2; cp = b0 & 0x1F; }       // C0, C1 would be overlong
    else if (b0 >= 0xE0 && b0 <= 0xEF) { length = 3; cp = b0 & 0x0F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { length = 4; cp = b0 & 0x07; }  // F5.. would be above U+10FFFF
    else { *cls = kUnicodeOther; return 1; }
    if ((size_t)length > n) { *cls = kUnicodeOther; return 1; }
    for (int k = 1; k < length; k++) {
        if ((s[k] & 0xC0) != 0x80) { *cls = kUnicodeOther; return 1; }
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) { *cls = kUnicodeOther; return 1; }
    *cls = unicode_class(cp);
    return length;
}

// where the piece that starts at text[start] ends (start < len), as GPT-2's pattern (leftmost-first alternation,
// greedy) matches it:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Pieces tile the text: the next piece starts where this one ends.
inline size_t tokenizer_piece_end(const char* text, size_t len, size_t start) {
    const unsigned char* s = (const unsigned char*)text;
    if (start >= len) return len;
    // 's|'t|'re|'ve|'m|'ll|'d (lowercase only, as in GPT-2); a lone ' is other and falls through
    if (s[start] == '\'' && start + 1 < len) {
        unsigned char c1 = s[start + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return start + 2;
        if (start + 2 < len) {
            unsigned char c2 = s[start + 2];
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return start + 3;
        }
    }
    UnicodeClass cls, next;
    size_t pos = start + tokenizer_utf8_char(s + start, len - start, &cls);
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': one space (U+0020 only) joins the run of the non-space after it
    if (s[start] == ' ' && pos < len) {
        int n = tokenizer_utf8_char(s + pos, len - pos, &next);
        if (next != kUnicodeSpace) { cls = next; pos += n; }
    }
    if (cls != kUnicodeSpace) {
        while (pos < len) {
            int n = tokenizer_utf8_char(s + pos, len - pos, &next);
            if (next != cls) break;
            pos += n;
        }
        return pos;
    }
    // a whitespace run: '\s+(?!\S)' takes all of it at the end of the text, else all but its last character, which
    // then starts the next piece (so " word" keeps its space); '\s+' takes a lone whitespace character before a non-space
    size_t last = start;  // start of the run's last character
    while (pos < len) {
        int n = tokenizer_utf8_char(s + pos, len - pos, &next);
        if (next != kUnicodeSpace) break;
        last = pos;
        pos += n;
    }
    if (pos == len || last == start) return pos;
    return last;
}

// ----------------------------------------------------------------------------
// encoding, step 2: byte pair merges

// appends the ids of one piece p[0..n) to *out; false if a byte of it is not a token. starts and pair_rank are
// scratch space: part i is p[starts[i] .. starts[i + 1]), pair_rank[i] the rank of parts i and i + 1 joined
inline bool tokenizer_merge_piece(const Tokenizer* tok, const unsigned char* p, size_t n, std::vector<uint32_t>* starts,
                                  std::vector<int>* pair_rank, std::vector<int>* out) {
    int whole = tokenizer_rank(tok, p, n);  // most pieces are one token: one lookup
    if (whole >= 0) { out->push_back(whole); return true; }
    if (n == 1) return false;
    starts->resize(n + 1);
    for (size_t i = 0; i <= n; i++) (*starts)[i] = (uint32_t)i;
    pair_rank->resize(n - 1);
    for (size_t i = 0; i + 1 < n; i++) {
        int r = tokenizer_rank(tok, p + i, 2);
        (*pair_rank)[i] = r >= 0 ? r : INT_MAX;
    }
    uint32_t* st = starts->data();
    int* pr = pair_rank->data();
    size_t parts = n;
    while (parts > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < parts; i++) if (pr[i] < pr[best]) best = i;  // strict <: leftmost on ties
        if (pr[best] == INT_MAX) break;
        // part best absorbs part best + 1: drop its start and the pair rank between them
        memmove(st + best + 1, st + best + 2, (parts - best - 1) * sizeof(uint32_t));
        memmove(pr + best, pr + best + 1, (parts - best - 2) * sizeof(int));
        parts--;
        if (best + 1 < parts) {
            int r = tokenizer_rank(tok, p + st[best], st[best + 2] - st[best]);
            pr[best] = r >= 0 ? r : INT_MAX;
        }
        if (best > 0) {
            int r = tokenizer_rank(tok, p + st[best - 1], st[best + 1] - st[best - 1]);
            pr[best - 1] = r >= 0 ? r : INT_MAX;
        }
    }
    for (size_t i = 0; i < parts; i++) {
        int id = tokenizer_rank(tok, p + st[i], st[i + 1] - st[i]);
        if (id < 0) return false;  // only an unmerged single byte can be missing
        out->push_back(id);
    }
    return true;
}

// ----------------------------------------------------------------------------
// encoding: the API

// appends the token ids of text[0..len) (UTF-8; any bytes are accepted) to *out, as tiktoken's encode_ordinary;
// "" or why not, in which case *out is as it was
inline std::string tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, std::vector<int>* out) {
    if (!tok->init_ok) return "tokenizer_encode: the tokenizer is not initialized";
    size_t out_size = out->size();
    std::vector<uint32_t> starts;
    std::vector<int> pair_rank;
    for (size_t pos = 0; pos < len;) {
        size_t end = tokenizer_piece_end(text, len, pos);
        if (!tokenizer_merge_piece(tok, (const unsigned char*)text + pos, end - pos, &starts, &pair_rank, out)) {
            out->resize(out_size);
            for (size_t i = pos; i < end; i++) {
                if (tokenizer_rank(tok, (const unsigned char*)text + i, 1) < 0)
                    return strfmt("tokenizer_encode: byte 0x%02x at offset %zu is not a token", (unsigned char)text[i], i);
            }
            return strfmt("tokenizer_encode: the piece at offset %zu could not be encoded", pos);
        }
        pos = end;
    }
    return "";
}
