// CPU tests of src/tokenizer.h: llm.c's gpt2_tokenizer.bin decode and bad files; the GPT-2 encoder's pre-tokenizer
// and byte pair merges on a small rank table written here; with ../shared/data present, the real GPT-2 ranks on
// strings whose ids come from scripts/prepro_tinyshakespeare.py's Python encoder, and all of tiny Shakespeare
// against the token shards that script writes.
#include <chrono>
#include "test.h"
#include "test_train_helpers.h"
#include "tokenizer.h"

static void write_tokenizer(const std::string& path, const std::vector<std::string>& tokens, uint32_t magic = 20240328,
                            uint32_t version = 2, bool truncate = false) {
    uint32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = (uint32_t)tokens.size();
    header[3] = (uint32_t)tokens.size() - 1;
    FILE* fp = fopen(path.c_str(), "wb");
    fwrite(header, sizeof(uint32_t), 256, fp);
    for (size_t i = 0; i < tokens.size(); i++) {
        if (truncate && i == tokens.size() - 1) break;
        unsigned char len = (unsigned char)tokens[i].size();
        fwrite(&len, 1, 1, fp);
        fwrite(tokens[i].data(), 1, len, fp);
    }
    fclose(fp);
}

TEST(tokenizer_decodes_tokens) {
    std::string dir = test_tmpdir(), path = dir + "/tok.bin";
    write_tokenizer(path, {"Hello", ",", " world", "\n", "<|endoftext|>"});
    Tokenizer tok;
    CHECK(tokenizer_init(&tok, path.c_str()) == "");
    CHECK(tok.vocab_size == 5 && tok.eot_token == 4);
    CHECK(std::string(tokenizer_decode(&tok, 0)) == "Hello");
    CHECK(std::string(tokenizer_decode(&tok, 2)) == " world");
    CHECK(std::string(tokenizer_decode(&tok, 4)) == "<|endoftext|>");
    CHECK(tokenizer_decode(&tok, 5) == nullptr);
    tokenizer_free(&tok);
    test_rmdir(dir);
}

TEST(tokenizer_rejects_bad_files) {
    std::string dir = test_tmpdir(), path = dir + "/tok.bin";
    Tokenizer tok;
    std::string err = tokenizer_init(&tok, (dir + "/missing.bin").c_str());
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("could not be opened") != std::string::npos);
    write_tokenizer(path, {"a", "b"}, 1234);
    err = tokenizer_init(&tok, path.c_str());
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("bad magic") != std::string::npos);
    write_tokenizer(path, {"a", "b", "c"}, 20240328, 2, true);
    err = tokenizer_init(&tok, path.c_str());
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("truncated") != std::string::npos && !tok.init_ok);
    test_rmdir(dir);
}

// ----------------------------------------------------------------------------
// pre-tokenizer: every expected split below is what Python's regex module gives for GPT-2's pattern

static std::vector<std::string> split_pieces(const std::string& text) {
    std::vector<std::string> pieces;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = tokenizer_piece_end(text.data(), text.size(), pos);
        if (end <= pos || end > text.size()) { pieces.push_back("<no progress>"); break; }
        pieces.push_back(text.substr(pos, end - pos));
        pos = end;
    }
    return pieces;
}

// prints the pieces on a mismatch, with non-printable bytes as \xNN
static bool split_is(const std::string& text, const std::vector<std::string>& expected) {
    std::vector<std::string> got = split_pieces(text);
    if (got == expected) return true;
    auto show = [](const std::vector<std::string>& pieces) {
        std::string s;
        for (const std::string& p : pieces) {
            s += "[";
            for (unsigned char c : p) s += (c >= 0x20 && c < 0x7F) ? std::string(1, (char)c) : strfmt("\\x%02x", c);
            s += "] ";
        }
        return s;
    };
    fprintf(stderr, "  split: expected %s\n         got      %s\n", show(expected).c_str(), show(got).c_str());
    return false;
}

TEST(tokenizer_splits_words_numbers_punctuation_and_contractions) {
    CHECK(split_is("hello world", {"hello", " world"}));
    CHECK(split_is("I'm he's they'll we've you're it'd 'S don't",
                   {"I", "'m", " he", "'s", " they", "'ll", " we", "'ve", " you", "'re", " it", "'d", " '", "S", " don", "'t"}));
    CHECK(split_is("'ll've're", {"'ll", "'ve", "'re"}));
    CHECK(split_is("'", {"'"}));
    CHECK(split_is("''s", {"''", "s"}));  // the ' run is taken before 's could match
    CHECK(split_is(" 's", {" '", "s"}));
    CHECK(split_is("abc123 456", {"abc", "123", " 456"}));
    CHECK(split_is("Hi!!! ...?", {"Hi", "!!!", " ...?"}));
    CHECK(split_is(" !", {" !"}));
    CHECK(split_is("", {}));
}

TEST(tokenizer_splits_whitespace_runs) {
    CHECK(split_is("a  b", {"a", " ", " b"}));       // \s+(?!\S) leaves the last space to " b"
    CHECK(split_is("end   ", {"end", "   "}));       // at the end of the text the whole run
    CHECK(split_is("  ", {"  "}));
    CHECK(split_is("a\n\nb", {"a", "\n", "\n", "b"}));  // a lone \n before a non-space is \s+
    CHECK(split_is("a\n\n", {"a", "\n\n"}));
    CHECK(split_is("a\r\n b", {"a", "\r\n", " b"}));
    CHECK(split_is("\n \n x", {"\n \n", " x"}));
    CHECK(split_is("\t x", {"\t", " x"}));
    CHECK(split_is("x  \ty", {"x", "  ", "\t", "y"}));
}

TEST(tokenizer_splits_unicode_and_invalid_utf8) {
    CHECK(split_is("h\xc3\xa9llo w\xc3\xb6rld 123", {"h\xc3\xa9llo", " w\xc3\xb6rld", " 123"}));  // héllo wörld 123
    CHECK(split_is("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xe3\x83\x86\xe3\x82\xad",             // 日本語 テキ: letters (Lo)
                   {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", " \xe3\x83\x86\xe3\x82\xad"}));
    CHECK(split_is("x\xc2\xb2\xc2\xbd\xe2\x85\xab", {"x", "\xc2\xb2\xc2\xbd\xe2\x85\xab"}));    // x²½Ⅻ: No, No, Nl are \p{N}
    CHECK(split_is("e\xcc\x81", {"e", "\xcc\x81"}));                                          // a combining mark (Mn) is neither
    CHECK(split_is("a\xe3\x80\x80\xe3\x80\x80" "b", {"a", "\xe3\x80\x80", "\xe3\x80\x80", "b"})); // U+3000 is \s
    CHECK(split_is("a \xc2\xa0" "b", {"a", " ", "\xc2\xa0", "b"}));                           // NBSP is \s, only U+0020 joins
    CHECK(split_is("a\xc2\x85" "b", {"a", "\xc2\x85", "b"}));                                 // U+0085 is White_Space
    CHECK(split_is("a\x1c" "b", {"a", "\x1c", "b"}));             // U+001C is not (though Python's isspace says so)
    CHECK(split_is("a \xf0\x9f\x98\x80!", {"a", " \xf0\x9f\x98\x80!"}));                      // emoji (So) + ! is one run
    // invalid UTF-8: each bad byte is a character of class other, as U+FFFD would be
    CHECK(split_is("a\xff\xfe" "b c", {"a", "\xff\xfe", "b", " c"}));
    CHECK(split_is(" \xff", {" \xff"}));
    CHECK(split_is("\xe2\x82" "a", {"\xe2\x82", "a"}));            // truncated sequence
    CHECK(split_is("\xc0\xaf" "a", {"\xc0\xaf", "a"}));            // overlong '/'
    CHECK(split_is("\xe0\x81\x81" "b", {"\xe0\x81\x81", "b"}));    // overlong 'A' is no letter
    CHECK(split_is("\xf0\x80\x81\x81" "b", {"\xf0\x80\x81\x81", "b"}));
    CHECK(split_is("\xed\xa0\x80" "a", {"\xed\xa0\x80", "a"}));    // a UTF-16 surrogate
    CHECK(split_is("a\xc3", {"a", "\xc3"}));                       // cut off at the end
}

// ----------------------------------------------------------------------------
// merges, on a small rank table: every single byte b has rank b, then a few merged tokens

static std::string base64_encode(const std::string& s) {
    static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
        uint32_t v = (unsigned char)s[i] << 16;
        if (i + 1 < s.size()) v |= (unsigned char)s[i + 1] << 8;
        if (i + 2 < s.size()) v |= (unsigned char)s[i + 2];
        out += digits[v >> 18];
        out += digits[(v >> 12) & 63];
        out += i + 1 < s.size() ? digits[(v >> 6) & 63] : '=';
        out += i + 2 < s.size() ? digits[v & 63] : '=';
    }
    return out;
}

// ranks 0..255 are the bytes, then (from 256) "bc" before "ab", so "abc" -> a, bc but "abd" -> ab, d
static const std::vector<std::string> kMerges = {"bc", "ab", "he", "ll", "hell", "hello", "aa", "\xc3\xa9", " w"};

static std::vector<std::string> small_vocab() {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; b++) tokens.push_back(std::string(1, (char)b));
    tokens.insert(tokens.end(), kMerges.begin(), kMerges.end());
    return tokens;
}

static void write_tiktoken(const std::string& path, const std::vector<std::string>& tokens) {
    std::string text;
    for (size_t r = 0; r < tokens.size(); r++) text += base64_encode(tokens[r]) + " " + std::to_string(r) + "\n";
    write_bytes(path, text.data(), text.size());
}

static std::vector<int> encode(const Tokenizer* tok, const std::string& text) {
    std::vector<int> ids;
    std::string err = tokenizer_encode(tok, text.data(), text.size(), &ids);
    if (!err.empty()) fprintf(stderr, "  encode error: %s\n", err.c_str());
    return ids;
}

// the merges, identical whichever file the table came from
static void check_small_table_encodes(const Tokenizer* tok) {
    CHECK(encode(tok, "abc") == std::vector<int>({'a', 256}));           // bc has the lower rank
    CHECK(encode(tok, "abd") == std::vector<int>({257, 'd'}));
    CHECK(encode(tok, "hello") == std::vector<int>({261}));              // the whole piece is a token
    CHECK(encode(tok, "hellx") == std::vector<int>({260, 'x'}));         // he, ll, then hell
    CHECK(encode(tok, " hello") == std::vector<int>({' ', 261}));        // " h" is no token: he, ll, hell, hello
    CHECK(encode(tok, "aaa") == std::vector<int>({262, 'a'}));           // the leftmost aa first
    CHECK(encode(tok, "aaaa") == std::vector<int>({262, 262}));
    CHECK(encode(tok, "caf\xc3\xa9") == std::vector<int>({'c', 'a', 'f', 263}));
    CHECK(encode(tok, "a world") == std::vector<int>({'a', 264, 'o', 'r', 'l', 'd'}));
    CHECK(encode(tok, "a\xff" "b") == std::vector<int>({'a', 0xff, 'b'}));  // an invalid byte is its own byte token
    CHECK(encode(tok, "") == std::vector<int>({}));
    // special tokens are not parsed inside text
    std::vector<int> ids = encode(tok, "<|endoftext|>");
    CHECK(ids.size() == 13);
    for (int id : ids) CHECK(id != tok->eot_token);
    // ids append to what *out holds
    std::vector<int> out = {tok->eot_token};
    CHECK(tokenizer_encode(tok, "ab", 2, &out) == "" && out == std::vector<int>({tok->eot_token, 257}));
    // decoding gives the bytes back, invalid UTF-8 and 0 bytes included
    std::string text = std::string("x\0y", 3) + " hello  w\xc3\xa9\xe2\x82 \xff\n\n";
    std::string back;
    for (int id : encode(tok, text)) {
        size_t n = 0;
        const char* p = tokenizer_token_bytes(tok, (uint32_t)id, &n);
        CHECK(p != nullptr);
        back.append(p, n);
    }
    CHECK(back == text);
}

TEST(tokenizer_encodes_with_a_tiktoken_rank_file) {
    std::string dir = test_tmpdir(), path = dir + "/small.tiktoken";
    write_tiktoken(path, small_vocab());
    Tokenizer tok;
    CHECK(tokenizer_init_tiktoken(&tok, path.c_str()) == "");
    CHECK(tok.vocab_size == 256 + kMerges.size() + 1 && tok.eot_token == 256 + (int)kMerges.size());
    CHECK(std::string(tokenizer_decode(&tok, tok.eot_token)) == "<|endoftext|>");
    CHECK(std::string(tokenizer_decode(&tok, 261)) == "hello");
    check_small_table_encodes(&tok);
    if (test_failed_flag()) return;
    tokenizer_free(&tok);
    test_rmdir(dir);
}

TEST(tokenizer_encodes_with_gpt2_tokenizer_bin) {
    std::string dir = test_tmpdir(), path = dir + "/small.bin";
    std::vector<std::string> tokens = small_vocab();
    tokens.push_back("<|endoftext|>");  // write_tokenizer's EOT is the last id
    write_tokenizer(path, tokens);
    Tokenizer tok;
    CHECK(tokenizer_init(&tok, path.c_str()) == "");
    CHECK(tok.eot_token == 256 + (int)kMerges.size());
    check_small_table_encodes(&tok);
    if (test_failed_flag()) return;
    tokenizer_free(&tok);
    test_rmdir(dir);
}

TEST(tokenizer_encode_reports_missing_bytes_and_bad_rank_files) {
    std::string dir = test_tmpdir(), path = dir + "/r.tiktoken";
    Tokenizer tok;
    tokenizer_zero(&tok);
    std::vector<int> ids;
    std::string err = tokenizer_encode(&tok, "a", 1, &ids);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("not initialized") != std::string::npos);
    write_tiktoken(path, {"a", "b", "ab"});
    CHECK(tokenizer_init_tiktoken(&tok, path.c_str()) == "");
    ids = {7};
    err = tokenizer_encode(&tok, "ab abc", 6, &ids);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find("byte 0x20 at offset 2") != std::string::npos && ids == std::vector<int>({7}));
    tokenizer_free(&tok);
    struct { const char* text; const char* expect; } bad[] = {
        {"YQ== 0\nYg== 0\n", "appears twice"},
        {"YQ== 0\nYg== 2\n", "no rank 1"},
        {"YQ= 0\n", "bad base64"},
        {"Y=Q= 0\n", "bad base64"},
        {"YQ==\n", "expected"},
        {"YQ== 0 1\n", "expected"},
        {"YQ== x\n", "expected"},
        {"\n\n", "no ranks"},
    };
    for (const auto& b : bad) {
        write_bytes(path, b.text, strlen(b.text));
        err = tokenizer_init_tiktoken(&tok, path.c_str());
        printf("  message: %s\n", err.c_str());
        CHECK(err.find(b.expect) != std::string::npos && !tok.init_ok);
    }
    err = tokenizer_init_tiktoken(&tok, (dir + "/missing.tiktoken").c_str());
    CHECK(err.find("could not be opened") != std::string::npos);
    test_rmdir(dir);
}

// ----------------------------------------------------------------------------
// the real GPT-2 ranks (../shared/data, or shared/data inside the repository)

static std::string find_data_file(const char* name) {
    for (const char* dir : {"../shared/data/", "shared/data/"}) {
        std::string path = std::string(dir) + name;
        if (file_size_bytes(path.c_str()) >= 0) return path;
    }
    return "";
}

TEST(tokenizer_gpt2_ranks_match_the_python_encoder) {
    std::string ranks = find_data_file("gpt2.tiktoken");
    if (ranks.empty()) { printf("  skipped: gpt2.tiktoken not found in ../shared/data or shared/data\n"); return; }
    Tokenizer tok;
    CHECK(tokenizer_init_tiktoken(&tok, ranks.c_str()) == "");
    CHECK(tok.vocab_size == 50257 && tok.eot_token == 50256);
    // ids from scripts/prepro_tinyshakespeare.py's PythonBPE (which agrees with tiktoken) on the same strings
    struct { const char* text; std::vector<int> ids; } cases[] = {
        {"Hello world", {15496, 995}},
        {"hello world", {31373, 995}},
        {"h\xc3\xa9llo w\xc3\xb6rld 123", {71, 2634, 18798, 266, 30570, 335, 17031}},
        {"I'm he's they'll", {40, 1101, 339, 338, 484, 1183}},
        {"a  b\n\n", {64, 220, 275, 628}},
        {"First Citizen:\nBefore we proceed any further, hear me speak.\n\n",
         {5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11, 3285, 502, 2740, 13, 628}},
        {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88 \xf0\x9f\x98\x80",
         {33768, 98, 17312, 105, 45739, 252, 14524, 228, 25084, 43302, 30325, 222}},
        {"x\xc2\xb2\xc2\xbd\xe2\x85\xab  \t\n", {87, 31185, 23141, 158, 227, 104, 220, 220, 197, 198}},
        {"   leading", {220, 220, 3756}},
        {"trailing   ", {9535, 4386, 220, 220, 220}},
        {"antidisestablishmentarianism", {415, 29207, 44390, 3699, 1042}},
    };
    for (const auto& c : cases) {
        std::vector<int> got = encode(&tok, c.text);
        if (got != c.ids) {
            std::string s;
            for (int id : got) s += std::to_string(id) + " ";
            fprintf(stderr, "  '%s' encodes to %s\n", c.text, s.c_str());
        }
        CHECK(got == c.ids);
    }
    tokenizer_free(&tok);
}

// an llm.c token shard's ids; "" or why not
static std::string read_shard(const std::string& path, std::vector<int>* ids) {
    std::string file;
    std::string err = tokenizer_read_file(path.c_str(), "shard", &file);
    if (!err.empty()) return err;
    int header[256];
    if (file.size() < sizeof(header)) return "shard " + path + " is truncated";
    memcpy(header, file.data(), sizeof(header));
    if (header[0] != 20240520 || header[1] != 1) return "shard " + path + " has a bad header";
    if (file.size() != sizeof(header) + 2 * (size_t)header[2]) return "shard " + path + " has the wrong size";
    const uint16_t* tokens = (const uint16_t*)(file.data() + sizeof(header));
    ids->insert(ids->end(), tokens, tokens + header[2]);
    return "";
}

// scripts/prepro_tinyshakespeare.py's tokenize_sections: split on "\n\n", each section starts with EOT, all but the
// last get their "\n\n" back
static std::string encode_sections(const Tokenizer* tok, const std::string& text, std::vector<int>* ids) {
    size_t pos = 0;
    for (;;) {
        size_t sep = text.find("\n\n", pos);
        size_t end = sep == std::string::npos ? text.size() : sep + 2;
        ids->push_back(tok->eot_token);
        std::string err = tokenizer_encode(tok, text.data() + pos, end - pos, ids);
        if (!err.empty() || sep == std::string::npos) return err;
        pos = end;
    }
}

static void check_encodes_corpus(const char* what, const Tokenizer* tok, const std::string& text, const std::vector<int>& expected) {
    std::vector<int> ids;
    auto t0 = std::chrono::steady_clock::now();
    std::string err = encode_sections(tok, text, &ids);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK(err == "");
    printf("  %s: %zu bytes -> %zu tokens in %.1f ms (%.1f MB/s)\n", what, text.size(), ids.size(), ms, text.size() / ms / 1e3);
    size_t i = 0;
    while (i < ids.size() && i < expected.size() && ids[i] == expected[i]) i++;
    if (i < ids.size() || i < expected.size()) {
        fprintf(stderr, "  first difference at token %zu of %zu (shards hold %zu):", i, ids.size(), expected.size());
        for (size_t j = i >= 3 ? i - 3 : 0; j < i + 3; j++)
            fprintf(stderr, " [%zu] %d vs %d", j, j < ids.size() ? ids[j] : -1, j < expected.size() ? expected[j] : -1);
        fprintf(stderr, "\n");
    }
    CHECK(ids == expected);
}

TEST(tokenizer_encodes_tiny_shakespeare_like_the_prep_script) {
    std::string text_path = find_data_file("tinyshakespeare.txt"), ranks_path = find_data_file("gpt2.tiktoken");
    std::string val = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin", train = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    if (text_path.empty() || ranks_path.empty()) {
        printf("  skipped: tinyshakespeare.txt or gpt2.tiktoken not found in ../shared/data or shared/data\n");
        return;
    }
    if (file_size_bytes(val.c_str()) < 0 || file_size_bytes(train.c_str()) < 0) {
        printf("  skipped: %s not found (run python3 scripts/prepro_tinyshakespeare.py)\n", val.c_str());
        return;
    }
    std::string text;
    CHECK(tokenizer_read_file(text_path.c_str(), "text", &text) == "");
    std::vector<int> expected;
    CHECK(read_shard(val, &expected) == "");
    CHECK(read_shard(train, &expected) == "");
    Tokenizer tok;
    CHECK(tokenizer_init_tiktoken(&tok, ranks_path.c_str()) == "");
    check_encodes_corpus(ranks_path.c_str(), &tok, text, expected);
    if (test_failed_flag()) return;
    // the decoded tokens, EOTs left out, are the text again
    std::string back;
    for (int id : expected) {
        if (id == tok.eot_token) continue;
        size_t n = 0;
        const char* p = tokenizer_token_bytes(&tok, (uint32_t)id, &n);
        CHECK(p != nullptr);
        back.append(p, n);
    }
    CHECK(back == text);
    tokenizer_free(&tok);
    // the prep script's gpt2_tokenizer.bin holds the same ranks
    if (file_size_bytes("gpt2_tokenizer.bin") >= 0) {
        CHECK(tokenizer_init(&tok, "gpt2_tokenizer.bin") == "");
        check_encodes_corpus("gpt2_tokenizer.bin", &tok, text, expected);
        tokenizer_free(&tok);
    }
}
