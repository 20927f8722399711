/*
General attention through src/attention.cuh's AttentionForwardParams / AttentionBackwardParams: non-causal, cross
(T != Tk, the causal diagonal aligned bottom-right), GQA and MQA, head dims 8 to 256, BTHD / BHTD / fused QKV layouts,
any softmax scale. Every case is validated forward (out and lse) and backward (dq, dk, dv, and bit-identical on a
second run) against the CPU fp64 reference of dev/cuda/reference.h with FlashAttention's rule (2x the naive bf16
computation's error plus a small constant), every output poisoned before each launch; then, unless --check, timed.

  make dev/cuda/attention_general
  ./dev/cuda/attention_general --check                        the validation set at input scales 1 and 8
  ./dev/cuda/attention_general --check --quick                the same at scale 1 only (make test runs this)
  ./dev/cuda/attention_general --check --quick --shard 0/3    every third validation case from the first
  ./dev/cuda/attention_general --x8 CASE ...                   cases validated at input scales 1 and 8 (any size)
  ./dev/cuda/attention_general --bench                        the benchmark cases (BHTD, as PyTorch's SDPA takes them)
  ./dev/cuda/attention_general --bench --fp16                 the same in fp16 (--fp16 makes every case given fp16)
  --bf16-values: the timed inputs hold bf16's 8 significant bits in either dtype (an A/B of fp16 and bf16 on the same
  values: the tensor cores' power, and so the clock under the power cap, depends on the operands' bits)
  ./dev/cuda/attention_general b=8,h=12,tq=1024,d=64,causal=0 one or more cases, validated then timed
  --schedule static|dynamic, --pdl 0|1, --sync-each: as in the other harnesses (common.h), for A/B runs and the
  anchor's way of timing (a sync after each timed forward + backward); --dbias-slots N: the ordered dBias's
  accumulator slots (src/attention.cuh's DbiasOrder; default by shape)

A case is the anchor script's syntax (../shared/bench/sdpa_general_anchor.py), so both time the same thing:
  b=[8] h=[12] hkv=[h] tq=[1024] tk=[tq] d=[64] causal=[1] bwd=[1] bias=[none]|(b|1)(h|1)(t|1)t, plus
  layout=[bhtd]|bthd|qkv, scale=[1/sqrt(d)], and the extras: biasf32=1 (an fp32 bias), dbias=1 (its gradient), mask=1
  (-inf entries), bias2=... bias2f32=1 dbias2=1 (a second bias, as the first), keymask=1 (a (B, Tk) key mask: 10% of
  the keys at random, every key of sequence 1, all but one of sequence 2), keylens=1 (per-sequence key lengths),
  varlen=1 (packed sequences of ragged lengths; varlen=2: of
  lengths tq / tk, the same tokens as the unpadded batch), gate=1 (output
  gating), docs=1 (document masking), kvlens=1 (a KV cache of per-sequence lengths), wl=N / wr=N (a sliding window:
  N keys left / right of the diagonal, FlashAttention's window_size; -1 unbounded), softcap=F (FlashAttention's
  softcap), alibi=1 (ALiBi slopes per head, FlashAttention's geometric ones; alibi=2: per sequence and head, random;
  alibi=3: per head, all 0: the score modifiers' copies at the plain call's work),
  fp16=1 (q, k, v, out and the gradients IEEE fp16 instead of bf16: the naive computation and the rule's constant fp16's),
  dropout=P (FlashAttention's dropout_p, a fresh seed and offset each run; the reference takes the kernels' mask)
FLOPs as the anchor script counts them: forward 4*B*H*Tq*Tk*D, halved for causal with tq = tk (per sequence with
keylens / varlen); with a window 4*H*D per (query, key) pair it sees; backward 2.5x forward. The anchor's causal bias cases fold the mask into the bias; here causal=1
with a bias is both.
*/
#include "dev/cuda/common.h"
#include "src/attention_modifiers.cuh"   // the dropout's mask, recomputed on the host for the reference

// one additive bias of a case: its broadcast shape (none, b1tt, 1htt, bhtt, b11t, 11tt), fp32 or bf16, its gradient
struct BiasSpec { std::string shape = "none"; bool fp32 = false, grad = false; };
struct GeneralCase {
    GeneralShape s;
    std::string layout;   // bthd, bhtd (each tensor its own buffer) or qkv (GPT-2's fused buffer: T = Tk, NH = NH_kv)
    bool bwd;
    bool kv_lens;         // a KV cache with a different length per sequence (attention_forward_kvcache; forward only)
    // AttentionExtras: the bias's broadcast shape (none, b1tt, 1htt, bhtt, b11t, 11tt), fp32 or bf16, its gradient,
    // -inf entries (mask: 10% of them, and whole rows where the bias has rows); key lengths per sequence (keylens:
    // seqlens_k on padded tensors); packed sequences (varlen: cu_seqlens_q / _k; 1: ragged lengths, 2: all T, Tk)
    std::string bias;
    bool bias_fp32, dbias, mask, keylens;
    int varlen;
    bool gate;            // output gating: gated_out = O * gate, dgate
    bool docs;            // document masking: documents of random lengths (1 to ~80) along each sequence
    BiasSpec bias2;       // a second bias (AttentionExtras::bias2)
    bool keymask;         // a (B, Tk) key mask (AttentionExtras::key_mask)
    int window_left, window_right;   // a sliding window (AttentionExtras::window); both -1: none
    double softcap;                  // AttentionExtras::softcap
    int alibi;                       // ALiBi slopes: 1 (NH), 2 (B, NH)
    bool fp16;                       // fp16 tensors (AttentionForwardParams::fp16), else bf16
    double dropout;                  // AttentionExtras::dropout_p
};

static GeneralCase parse_case(const std::string& arg) {
    int b = 8, h = 12, hkv = -1, tq = 1024, tk = -1, d = 64, causal = 1, bwd = 1, kvlens = 0;
    int biasf32 = 0, dbias = 0, mask = 0, keylens = 0, varlen = 0, gate = 0, docs = 0, bias2f32 = 0, dbias2 = 0, keymask = 0;
    int wl = -1, wr = -1, alibi = 0, fp16 = 0;
    double softcap = 0.0, dropout = 0.0;
    std::string bias2 = "none";
    double scale = 0.0;
    std::string layout = "bhtd", bias = "none";
    for (const std::string& kv : split_commas(arg)) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) { fprintf(stderr, "bad case item '%s' (want key=value)\n", kv.c_str()); exit(EXIT_FAILURE); }
        const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        if (k == "b") b = atoi(v.c_str()); else if (k == "h") h = atoi(v.c_str()); else if (k == "hkv") hkv = atoi(v.c_str());
        else if (k == "tq") tq = atoi(v.c_str()); else if (k == "tk") tk = atoi(v.c_str()); else if (k == "d") d = atoi(v.c_str());
        else if (k == "causal") causal = atoi(v.c_str()); else if (k == "bwd") bwd = atoi(v.c_str());
        else if (k == "scale") scale = atof(v.c_str()); else if (k == "layout") layout = v; else if (k == "kvlens") kvlens = atoi(v.c_str());
        else if (k == "bias") bias = v; else if (k == "biasf32") biasf32 = atoi(v.c_str()); else if (k == "dbias") dbias = atoi(v.c_str());
        else if (k == "mask") mask = atoi(v.c_str()); else if (k == "keylens") keylens = atoi(v.c_str()); else if (k == "varlen") varlen = atoi(v.c_str());
        else if (k == "gate") gate = atoi(v.c_str()); else if (k == "docs") docs = atoi(v.c_str());
        else if (k == "bias2") bias2 = v; else if (k == "bias2f32") bias2f32 = atoi(v.c_str()); else if (k == "dbias2") dbias2 = atoi(v.c_str());
        else if (k == "keymask") keymask = atoi(v.c_str());
        else if (k == "wl") wl = atoi(v.c_str()); else if (k == "wr") wr = atoi(v.c_str());
        else if (k == "softcap") softcap = atof(v.c_str()); else if (k == "alibi") alibi = atoi(v.c_str());
        else if (k == "fp16") fp16 = atoi(v.c_str()); else if (k == "dropout") dropout = atof(v.c_str());
        else { fprintf(stderr, "unknown case key '%s'\n", k.c_str()); exit(EXIT_FAILURE); }
    }
    if (hkv < 0) hkv = h;
    if (tk < 0) tk = tq;
    if (scale == 0.0) scale = 1.0 / std::sqrt((double)d);
    if (layout != "bthd" && layout != "bhtd" && layout != "qkv") { fprintf(stderr, "layout: bthd, bhtd or qkv\n"); exit(EXIT_FAILURE); }
    if (layout == "qkv" && (tk != tq || hkv != h)) { fprintf(stderr, "layout=qkv needs tk = tq and hkv = h\n"); exit(EXIT_FAILURE); }
    if (kvlens) bwd = 0;
    for (const std::string& sh : {bias, bias2})   // (b or 1)(h or 1)(t or 1)t: each dimension kept or broadcast
        if (sh != "none" && (sh.size() != 4 || (sh[0] != 'b' && sh[0] != '1') || (sh[1] != 'h' && sh[1] != '1') ||
                             (sh[2] != 't' && sh[2] != '1') || sh[3] != 't')) {
            fprintf(stderr, "bias, bias2: none or (b|1)(h|1)(t|1)t, e.g. b1tt, 1htt, bhtt, b11t, 11tt\n"); exit(EXIT_FAILURE);
        }
    if ((varlen || keylens || gate || keymask || bias != "none" || bias2 != "none") && layout == "qkv") { fprintf(stderr, "extras take bthd or bhtd\n"); exit(EXIT_FAILURE); }
    if (varlen) layout = "bthd";   // packed: (total rows, heads, head dim)
    return {{b, tq, tk, h, hkv, d, causal != 0, scale}, layout, bwd != 0, kvlens != 0, bias, biasf32 != 0, dbias != 0 && bias != "none",
            mask != 0 && bias != "none", keylens != 0, varlen, gate != 0, docs != 0, {bias2, bias2f32 != 0, dbias2 != 0 && bias2 != "none"},
            keymask != 0, wl, wr, softcap, alibi, fp16 != 0, dropout};
}

// the validation set: every feature of the general interface, ragged lengths, rows that see no key, tiny and large B*NH
static const char* kValidationCases[] = {
    "b=2,h=3,tq=200,d=64,causal=0",                "b=2,h=2,tq=257,d=128,causal=0,layout=bthd",
    "b=2,h=2,tq=100,tk=300,d=64",                   "b=2,h=2,tq=300,tk=100,d=128",        // causal cross; T > Tk: masked rows
    "b=3,h=4,tq=1,tk=513,d=64,causal=0",            "b=2,h=4,tq=1,tk=1000,d=128",         // T = 1
    "b=2,h=2,tq=77,tk=1,d=128,causal=0",            "b=2,h=2,tq=77,tk=1,d=64",            // Tk = 1
    "b=1,h=32,hkv=8,tq=128,d=64",                   "b=2,h=32,hkv=8,tq=190,d=128,causal=0", // GQA 32/8
    "b=2,h=8,hkv=1,tq=150,d=64",                    "b=1,h=4,hkv=1,tq=64,tk=200,d=128,causal=0", // MQA
    "b=2,h=3,tq=333,d=32",                          "b=2,h=4,hkv=2,tq=130,d=32,causal=0",
    "b=2,h=3,tq=333,d=96",                          "b=2,h=2,tq=100,tk=170,d=96,causal=0",
    "b=2,h=2,tq=200,d=256",                         "b=1,h=2,tq=70,tk=130,d=256,causal=0",
    "b=2,h=4,hkv=2,tq=190,tk=250,d=256",            "b=2,h=2,tq=300,tk=100,d=256",        // HS 256: GQA, causal cross both ways,
    "b=2,h=2,tq=77,tk=1,d=256,causal=0",            "b=8,h=8,tq=256,d=256",               // Tk = 1, several items a CTA
    "b=1,h=2,hkv=1,tq=640,d=256,causal=0,layout=bthd",
    "b=2,h=3,tq=129,d=64,layout=qkv,scale=0.3",     "b=2,h=4,tq=600,d=64",                // custom scale; BHTD self-causal
    "b=2,h=2,tq=1024,d=128",                        "b=1,h=1,tq=1,d=64",
    "b=64,h=16,tq=64,d=64,causal=0",
    // decoding (the split-key kernels): KV lengths 1 to 131072, batch 1 to 64, GQA 32/8, T = 1 to 4, every head dim,
    // and a cache with a different length per sequence
    "b=1,h=32,hkv=8,tq=1,tk=1,d=128,causal=0,bwd=0",  "b=4,h=12,tq=1,tk=7,d=64,bwd=0",
    "b=2,h=32,hkv=8,tq=1,tk=1000,d=128",               "b=1,h=32,hkv=8,tq=1,tk=32768,d=128,causal=0,bwd=0",
    "b=1,h=32,hkv=8,tq=1,tk=131072,d=128,causal=0,bwd=0", "b=64,h=12,tq=1,tk=1024,d=64,causal=0,bwd=0",
    "b=2,h=12,tq=2,tk=700,d=64",                       "b=3,h=8,hkv=2,tq=4,tk=300,d=64",
    "b=2,h=4,tq=1,tk=257,d=32",                        "b=2,h=4,tq=1,tk=300,d=96,causal=0",
    "b=2,h=2,tq=1,tk=600,d=256",                  "b=5,h=8,hkv=2,tq=1,tk=2000,d=128,kvlens=1",
    "b=4,h=12,tq=3,tk=999,d=64,kvlens=1,layout=bthd",
    // AttentionExtras: every broadcast pattern of the bias (bf16 and fp32, dbias, -inf entries and fully masked rows),
    // key lengths 0, 1 and Tk, packed sequences of 1 to 64 with lengths 1 to 4097, self and cross, causal or not (packs
    // carry their totals: the Hopper kVarlen copies at head dims 64, 128 and the forward's 256; with another extra or
    // head dim, the mma.sync kExtras copies)
    "b=2,h=3,tq=200,d=64,causal=0,bias=1htt,dbias=1",            "b=2,h=2,tq=150,tk=170,d=128,bias=bhtt,biasf32=1,dbias=1,mask=1",
    "b=3,h=2,tq=130,d=64,causal=0,bias=b1tt,dbias=1,mask=1",     "b=2,h=4,hkv=2,tq=100,tk=257,d=32,causal=0,bias=b11t,dbias=1",
    "b=2,h=2,tq=190,d=96,bias=11tt,biasf32=1,dbias=1,mask=1",    "b=2,h=2,tq=70,d=256,causal=0,bias=1htt,dbias=1",
    "b=2,h=2,tq=64,tk=300,d=64,causal=0,bias=b11t,mask=1,layout=bthd",
    // bf16 biases whose strides TMA takes: the Hopper kBias copies, forward and (head dims 64, 128) backward, with dBias
    // (rows broadcast, GQA, causal T != Tk, fully masked rows, several items per CTA, claimed items from T = 4096)
    "b=2,h=3,tq=200,tk=256,d=64,causal=0,bias=b11t,mask=1",      "b=2,h=2,tq=150,tk=192,d=128,bias=11tt,mask=1",
    "b=1,h=2,tq=130,tk=192,d=256,bias=bhtt,mask=1,dbias=1",      "b=2,h=4,hkv=2,tq=129,tk=320,d=64,bias=1htt",
    "b=8,h=8,tq=512,d=64,bias=1htt,mask=1",                      "b=8,h=8,tq=384,d=128,bias=b1tt",
    "b=2,h=4,hkv=2,tq=200,tk=136,d=128,causal=0,bias=b11t,dbias=1,mask=1", "b=2,h=2,tq=150,tk=192,d=128,bias=bhtt,dbias=1,mask=1",
    "b=3,h=2,tq=100,tk=64,d=64,bias=b1tt,dbias=1",               "b=1,h=1,tq=4096,d=64,bias=11tt,mask=1",
    "b=1,h=1,tq=4096,tk=4104,d=128,bias=1htt,dbias=1",
    "b=4,h=2,tq=129,tk=300,d=64,causal=0,keylens=1",             "b=4,h=4,hkv=2,tq=77,tk=200,d=128,keylens=1",
    "b=5,h=3,tq=300,d=64,varlen=1",                              "b=4,h=4,hkv=1,tq=200,tk=333,d=128,causal=0,varlen=1",
    "b=3,h=2,tq=150,d=64,varlen=1,bias=1htt,dbias=1,mask=1",     "b=64,h=2,tq=300,d=64,varlen=1",
    "b=1,h=2,tq=4097,d=64,varlen=1",                             "b=3,h=2,tq=100,d=32,varlen=1,causal=0",
    "b=4,h=2,tq=150,tk=260,d=64,varlen=1",                       "b=3,h=4,hkv=2,tq=200,d=256,varlen=1",
    "b=6,h=2,hkv=1,tq=330,tk=140,d=128,varlen=1",                "b=3,h=2,tq=200,tk=300,d=128,causal=0,varlen=2",
    // head dim 96 on HS 128's Hopper copies, zero-padded: GQA, causal cross both ways, Tk = 1, fused QKV, a bf16 bias
    // with dBias, packed sequences, claimed items (T = 4096)
    "b=2,h=4,hkv=2,tq=190,tk=250,d=96",                          "b=2,h=2,tq=300,tk=100,d=96",
    "b=2,h=2,tq=77,tk=1,d=96,causal=0",                          "b=2,h=3,tq=129,d=96,layout=qkv",
    "b=2,h=2,tq=150,tk=192,d=96,bias=bhtt,dbias=1,mask=1",       "b=3,h=4,hkv=2,tq=200,d=96,varlen=1",
    "b=1,h=2,tq=4096,d=96,layout=bthd",
    // head dims 8 (zero-padded to 16 in the kernels) and 16
    "b=2,h=3,tq=150,d=16",                                       "b=2,h=4,hkv=2,tq=100,tk=230,d=8,causal=0",
    "b=2,h=2,tq=120,d=8,bias=1htt,dbias=1,mask=1",               "b=3,h=2,tq=90,d=16,varlen=1,causal=0,bias=bhtt,biasf32=1",
    // output gating, alone and with a bias and packed sequences (AlphaFold's attention: pair bias, gate, head dim 8/16/32)
    "b=2,h=3,tq=140,d=64,causal=0,gate=1",                       "b=3,h=4,tq=100,d=32,causal=0,bias=b1tt,dbias=1,gate=1,mask=1",
    "b=3,h=2,tq=120,d=16,varlen=1,gate=1",
    // AlphaFold's attention (head dims 8-32 on HS 64's Hopper copies): a pair bias, a mask bias (bias2 without rows: the
    // key bias) and a key mask (whole sequences masked, one key seen), gating, both gradients; two biases with rows (summed);
    // odd lengths (the bf16 bias's rows copied to 16-byte rows for TMA); T = 1 and 1536
    "b=6,h=4,tq=200,d=32,causal=0,bias=1htt,dbias=1,bias2=b11t,keymask=1,gate=1", "b=4,h=2,tq=131,d=16,causal=0,bias=1htt,bias2=b11t,dbias2=1,keymask=1",
    "b=5,h=8,tq=77,d=8,causal=0,bias=bhtt,biasf32=1,bias2=1htt,dbias=1,dbias2=1",  "b=3,h=2,tq=1,d=32,causal=0,bias=1htt,keymask=1",
    "b=3,h=4,tq=759,d=32,causal=0,bias=1htt,dbias=1,keymask=1,gate=1",          "b=3,h=2,tq=300,tk=759,d=32,causal=0,bias2=b1tt,bias2f32=1,dbias2=1,keymask=1",
    "b=3,h=2,tq=259,d=64,causal=0,bias=11tt,bias2=b11t,bias2f32=1,dbias=1,keymask=1", "b=4,h=3,tq=100,d=16,bias2=bhtt,dbias2=1,keymask=1",
    "b=3,h=2,tq=64,d=8,causal=0,keymask=1",                                       "b=3,h=2,tq=70,d=32,causal=0,gate=1",
    "b=2,h=4,hkv=2,tq=150,d=32,causal=0",                                         "b=3,h=2,tq=1536,d=32,causal=0,bias=1htt,dbias=1,keymask=1",
    "b=3,h=2,tq=333,tk=200,d=16,causal=0,bias=11tt,dbias=1,bias2=1h1t,keymask=1",
    // document masking (train_gpt2cu -dm 1): random document boundaries along each sequence
    "b=2,h=3,tq=300,d=64,docs=1",                                "b=2,h=4,tq=257,d=128,docs=1,layout=bthd",
    "b=3,h=2,hkv=1,tq=200,d=32,docs=1,bias=1htt,dbias=1",
    // sliding windows (FlashAttention's window_size, bottom-right aligned): causal and not, narrower and wider than a
    // tile, one-sided, cross both ways (rows that see no key), GQA / MQA, every head dim and path (general Hopper and
    // mma.sync copies, the kBias, kVarlen and kExtras copies), a window past the sequence (unbounded)
    "b=2,h=3,tq=700,d=64,wl=100",                                "b=2,h=2,tq=515,d=128,wl=37",
    "b=2,h=3,tq=600,d=64,causal=0,wl=64,wr=64",                  "b=2,h=2,tq=333,d=128,causal=0,wl=5,wr=0",
    "b=2,h=2,tq=300,tk=700,d=64,causal=0,wl=-1,wr=20",           "b=2,h=4,hkv=2,tq=700,tk=300,d=128,wl=50",
    "b=1,h=4,hkv=1,tq=256,tk=900,d=64,causal=0,wl=0,wr=0",       "b=2,h=3,tq=400,d=32,wl=17",
    "b=2,h=2,tq=333,d=96,causal=0,wl=90,wr=3",                   "b=2,h=2,tq=300,d=256,wl=130",
    "b=2,h=2,tq=200,tk=330,d=256,causal=0,wl=40,wr=40",          "b=2,h=3,tq=150,d=16,causal=0,wl=9,wr=30",
    "b=2,h=2,tq=130,d=8,wl=3",                                   "b=2,h=2,tq=257,d=64,wl=5000,wr=5000,causal=0",
    "b=4,h=2,tq=600,d=64,varlen=1,wl=70",                        "b=3,h=2,tq=300,tk=500,d=128,varlen=1,causal=0,wl=20,wr=100",
    "b=2,h=2,tq=300,d=64,causal=0,bias=1htt,dbias=1,wl=40,wr=10", "b=2,h=2,tq=257,d=128,bias=b11t,dbias=1,mask=1,wl=60",
    "b=4,h=2,tq=200,tk=300,d=64,causal=0,keylens=1,wl=30,wr=30", "b=2,h=3,tq=300,d=64,docs=1,wl=50",
    "b=2,h=2,tq=4100,d=128,wl=1024",                             "b=1,h=4,tq=2500,d=64,wl=300",
    // the score modifiers (FlashAttention's softcap and ALiBi), alone and together, with windows, causal cross, GQA,
    // packs, key lengths, a bias beside ALiBi; every head dim and path (the Hopper kMods copies, the mma.sync copies)
    "b=2,h=3,tq=300,d=64,softcap=30",                            "b=2,h=2,tq=257,tk=400,d=128,causal=0,softcap=5",
    "b=2,h=4,hkv=2,tq=333,d=64,alibi=1",                         "b=2,h=4,tq=200,tk=300,d=128,causal=0,alibi=2",
    "b=2,h=2,tq=300,tk=170,d=64,softcap=10,alibi=2",             "b=2,h=3,tq=400,d=128,causal=0,softcap=20,alibi=1,wl=60,wr=30",
    "b=2,h=2,tq=200,d=256,softcap=15,alibi=1",                   "b=2,h=2,tq=190,tk=250,d=256,causal=0,alibi=2,wl=50",
    "b=2,h=3,tq=150,d=32,softcap=8",                             "b=2,h=2,tq=140,d=96,causal=0,alibi=1,softcap=12",
    "b=2,h=2,tq=100,d=16,alibi=2",                               "b=2,h=2,tq=130,d=8,causal=0,softcap=3",
    "b=4,h=2,tq=300,d=64,varlen=1,alibi=2,softcap=25",           "b=3,h=2,tq=200,tk=300,d=128,varlen=1,causal=0,alibi=1",
    "b=4,h=2,tq=200,tk=300,d=64,causal=0,keylens=1,softcap=10",  "b=2,h=2,tq=200,d=64,causal=0,bias=1htt,dbias=1,alibi=2",
    "b=2,h=4,hkv=1,tq=1,tk=700,d=128,alibi=1,softcap=30",        "b=1,h=4,tq=2100,d=128,alibi=1,wl=512",
    "b=2,h=3,tq=300,d=64,docs=1,softcap=5,alibi=1",
    // softcap alone: Gemma's head dim 256 with GQA, fp16 causal cross with a window (the keys left of it at -inf,
    // where dS's softcap factor must stay finite), MQA non-causal
    "b=2,h=4,hkv=2,tq=300,d=256,softcap=50",                     "b=2,h=4,hkv=2,tq=200,tk=333,d=128,softcap=20,wl=64,fp16=1",
    "b=3,h=4,hkv=1,tq=150,tk=260,d=64,causal=0,softcap=10",
    // fp16: every kernel family bf16 runs (general Hopper at 64 / 96 / 128 / 256 and zero-padded 8-32, GPT-2's family
    // with its CTA pairs and claimed items, decoding, the kBias, kVarlen, kMods and kExtras copies, gating, AlphaFold's
    // call; GPT-2's ordered atomic dQ from T = 8192 is the case b=1,h=1,tq=8192,d=128,layout=qkv,fp16=1, too slow for
    // the CPU reference here)
    "b=2,h=3,tq=200,d=64,causal=0,fp16=1",                       "b=2,h=4,hkv=2,tq=190,tk=250,d=128,fp16=1",
    "b=2,h=2,tq=300,tk=100,d=256,fp16=1",                        "b=2,h=3,tq=333,d=32,fp16=1",
    "b=2,h=2,tq=100,tk=170,d=96,causal=0,fp16=1",                "b=2,h=3,tq=150,d=16,fp16=1",
    "b=2,h=3,tq=129,d=64,layout=qkv,fp16=1",                     "b=2,h=2,tq=1024,d=128,fp16=1",
    "b=1,h=2,tq=4096,d=96,layout=bthd,fp16=1",
    "b=2,h=32,hkv=8,tq=1,tk=1000,d=128,fp16=1",                  "b=3,h=2,tq=130,tk=192,d=64,causal=0,bias=b1tt,dbias=1,mask=1,fp16=1",
    "b=2,h=3,tq=140,d=64,causal=0,gate=1,fp16=1",                "b=5,h=3,tq=300,d=64,varlen=1,fp16=1",
    "b=4,h=2,tq=129,tk=300,d=64,causal=0,keylens=1,fp16=1",      "b=2,h=3,tq=300,d=64,docs=1,fp16=1",
    "b=2,h=2,tq=300,tk=170,d=64,softcap=10,alibi=2,fp16=1",      "b=2,h=2,tq=200,d=256,softcap=15,alibi=1,wl=50,fp16=1",
    "b=3,h=4,tq=759,d=32,causal=0,bias=1htt,dbias=1,keymask=1,gate=1,fp16=1",
    // dropout (FlashAttention's dropout_p, its 0.17 and others; the mma.sync kExtras copies): every head dim, causal
    // and not, GQA, causal cross with rows that see no key, packs, key lengths, fp16, with a window, ALiBi, a bias
    // with dBias and gating
    "b=2,h=3,tq=200,d=64,causal=0,dropout=0.17",                 "b=2,h=4,hkv=2,tq=190,tk=250,d=128,dropout=0.17",
    "b=2,h=2,tq=130,tk=200,d=256,causal=0,dropout=0.3",          "b=2,h=3,tq=150,d=32,dropout=0.17,alibi=1",
    "b=2,h=2,tq=100,tk=170,d=96,causal=0,dropout=0.17,wl=30,wr=10", "b=2,h=3,tq=77,d=16,dropout=0.5",
    "b=2,h=2,tq=90,d=8,causal=0,dropout=0.17",                   "b=4,h=2,tq=300,d=64,varlen=1,dropout=0.17",
    "b=4,h=2,tq=129,tk=300,d=64,causal=0,keylens=1,dropout=0.17", "b=2,h=3,tq=257,d=64,dropout=0.17,fp16=1",
    "b=2,h=2,tq=140,d=64,causal=0,bias=1htt,dbias=1,gate=1,dropout=0.1", "b=2,h=2,tq=300,tk=100,d=128,dropout=0.17",
    // head dims between the compiled ones (FlashAttention's 40, 80, 160, 192, 224 and the other multiples of 8), zero-
    // padded on the next one's Hopper copies (skipped before sm_90a): causal and not, cross both ways, GQA / MQA, T = 1,
    // Tk = 1, fused QKV, windows, softcap, ALiBi, dropout up to 128, packed sequences up to 128, fp16, claimed items
    "b=2,h=3,tq=200,d=40,causal=0",                              "b=2,h=4,hkv=2,tq=190,tk=250,d=80",
    "b=2,h=2,tq=300,tk=100,d=160",                               "b=2,h=2,tq=77,tk=1,d=192,causal=0",
    "b=2,h=3,tq=129,d=224,layout=qkv",                           "b=2,h=4,hkv=1,tq=1,tk=600,d=48",
    "b=2,h=2,tq=300,d=120,wl=50",                                "b=2,h=2,tq=257,tk=400,d=72,causal=0,softcap=5",
    "b=2,h=4,hkv=2,tq=333,d=56,alibi=1",                         "b=2,h=2,tq=200,d=200,causal=0,softcap=15,alibi=2,wl=60,wr=30",
    "b=2,h=3,tq=200,d=104,causal=0,dropout=0.17",                "b=4,h=2,tq=300,d=88,varlen=1",
    "b=3,h=2,tq=200,tk=300,d=40,varlen=1,causal=0,wl=20,wr=100", "b=2,h=4,hkv=2,tq=190,tk=250,d=136,fp16=1",
    "b=1,h=2,tq=4096,d=80,layout=bthd",                          "b=1,h=2,tq=1100,d=248,causal=0",
    "b=4,h=4,hkv=2,tq=300,d=48,varlen=1",
};
// the benchmark cases of the general-attention issue (the anchor script runs the same strings)
static const char* kBenchCases[] = {
    "b=1,h=32,hkv=8,tq=1,tk=32768,d=128,causal=0,bwd=0", "b=64,h=12,tq=1,tk=1024,d=64,causal=0,bwd=0",
    "b=1,h=32,hkv=8,tq=1,tk=131072,d=128,causal=0,bwd=0", "b=8,h=32,hkv=8,tq=1,tk=8192,d=128,causal=0,bwd=0",
    "b=8,h=12,tq=1024,d=64,causal=0",      "b=4,h=16,tq=8192,d=128,causal=0", "b=4,h=16,tq=4096,d=256",
    "b=4,h=32,hkv=8,tq=4096,d=128",        "b=8,h=12,tq=1024,tk=4096,d=64,causal=0",
    "b=8,h=12,tq=1024,d=32",               "b=8,h=12,tq=1024,d=96",            "b=4,h=16,tq=4096,d=64",
    "b=4,h=16,tq=4096,d=128",              "b=4,h=16,tq=4096,d=256,causal=0",  "b=4,h=32,hkv=8,tq=4096,d=256",
    "b=8,h=16,tq=1024,d=256",
    "b=8,h=12,tq=1024,d=64,causal=0,bias=1htt", "b=8,h=12,tq=1024,d=64,bias=1htt", "b=8,h=12,tq=1024,d=64,causal=0,bias=bhtt",
    "b=8,h=12,tq=1024,d=64,causal=0,bias=1htt,dbias=1", "b=16,h=12,tq=1024,d=64,varlen=1", "b=16,h=12,tq=1024,d=64,causal=0,varlen=1",
    "b=16,h=12,tq=1024,d=64,varlen=2", "b=16,h=12,tq=1024,d=64,causal=0,varlen=2",
    "b=16,h=12,tq=1024,d=64,causal=0,keylens=1", "b=8,h=12,tq=1024,d=64,docs=1",
};

// A case's 16-bit values on the host: bf16, or fp16 (its bits kept in floatX buffers, as the kernels take them)
static floatX to_16bit(float x, bool fp16) {
    if (!fp16) return __float2bfloat16(x);
    const __half h = __float2half(x);
    floatX r;
    memcpy(&r, &h, 2);
    return r;
}
static float from_16bit(floatX x, bool fp16) {
    if (!fp16) return __bfloat162float(x);
    __half h;
    memcpy(&h, &x, 2);
    return __half2float(h);
}

// pseudo-random 16-bit values (uniform, variance `scale`^2) for the cases too big to validate, so that none is timed on
// zeros; bf16_values: fp16 values that hold only bf16's 8 significant bits (the tensor cores' power, and so the clock
// under the power cap, depends on the operands' bits: this times fp16 on the data a bf16 call sees)
__global__ void fill_uniform_16bit(floatX* p, size_t n, uint64_t seed, float scale, bool fp16, bool bf16_values) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;   // splitmix64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; z ^= z >> 31;
        float x = ((float)(z >> 40) * (1.0f / 16777216.0f) - 0.5f) * 3.4641016f * scale;
        if (bf16_values) x = __bfloat162float(__float2bfloat16(x));
        if (fp16) reinterpret_cast<__half*>(p)[i] = __float2half(x);
        else p[i] = (floatX)x;
    }
}

// per sequence with its own lengths (x: keylens, varlen), as the anchor script counts one batch
static double forward_flops(const GeneralShape& s, const GeneralExtras& x) {
    double f = 0.0;
    for (int b = 0; b < s.B; b++) {
        const int T = general_seq_T(s, &x, b), Tk = general_seq_Tk(s, &x, b);
        if (x.window_left < 0 && x.window_right < 0) { f += 4.0 * s.NH * (double)T * Tk * s.HS / (s.causal && T == Tk ? 2 : 1); continue; }
        for (long long i = 0; i < T; i++) {   // the keys each row sees
            const long long right = s.causal ? 0 : x.window_right, d = i + Tk - T;
            const long long lo = x.window_left < 0 ? 0 : std::max(0LL, d - x.window_left);
            const long long hi = right < 0 ? Tk - 1 : std::min<long long>(Tk - 1, d + right);
            f += 4.0 * s.NH * s.HS * (double)std::max(0LL, hi - lo + 1);
        }
    }
    return f;
}

// one tensor of (B, T, H, HS) in the case's layout: its strides and the element count of its buffer
// Packed (varlen): sequence b's rows start at row cu[b] of one (total rows, H, HS) buffer, batch stride 0, and rows
// past its length cu[b + 1] - cu[b] do not exist.
struct LayoutTensor { AttentionStrides st; size_t elems; std::vector<int> cu; };
static LayoutTensor layout_tensor(const std::string& layout, int B, int T, int H, int HS) {
    if (layout == "bhtd") return {{(long long)H * T * HS, HS, (long long)T * HS}, (size_t)B * H * T * HS, {}};
    if (layout == "qkv") return {fused_qkv_strides(T, H, HS), 3 * (size_t)B * T * H * HS, {}};
    return {bthd_strides(T, H, HS), (size_t)B * T * H * HS, {}};
}
static LayoutTensor packed_tensor(const std::vector<int>& lengths, int H, int HS) {
    LayoutTensor lt{{0, (long long)H * HS, HS}, 0, {0}};
    for (int len : lengths) lt.cu.push_back(lt.cu.back() + len);
    lt.elems = (size_t)std::max(lt.cu.back(), 1) * H * HS;
    return lt;
}
static bool layout_has_row(const LayoutTensor& lt, int b, int t) { return lt.cu.empty() || t < lt.cu[b + 1] - lt.cu[b]; }
static size_t layout_offset(const LayoutTensor& lt, int b, int t, int h) {
    return b * lt.st.batch + ((lt.cu.empty() ? 0 : lt.cu[b]) + t) * lt.st.row + h * lt.st.head;
}

// logical (B, T, H, HS) floats <-> a 16-bit buffer in the layout (base: the tensor's first element in that buffer)
static void scatter(std::vector<floatX>& buf, size_t base, const LayoutTensor& st, const std::vector<float>& x, int B, int T, int H, int HS,
                    bool fp16) {
    for (int b = 0; b < B; b++) for (int t = 0; t < T; t++) for (int h = 0; h < H; h++) for (int d = 0; d < HS; d++)
        if (layout_has_row(st, b, t)) buf[base + layout_offset(st, b, t, h) + d] = to_16bit(x[bthd_index(b, t, h, d, T, H, HS)], fp16);
}
// rows a packed tensor does not have read as 0 (the reference's value there)
static std::vector<float> gather(const std::vector<floatX>& buf, size_t base, const LayoutTensor& st, int B, int T, int H, int HS, bool fp16) {
    std::vector<float> x((size_t)B * T * H * HS, 0.0f);
    for (int b = 0; b < B; b++) for (int t = 0; t < T; t++) for (int h = 0; h < H; h++) for (int d = 0; d < HS; d++)
        if (layout_has_row(st, b, t)) x[bthd_index(b, t, h, d, T, H, HS)] = from_16bit(buf[base + layout_offset(st, b, t, h) + d], fp16);
    return x;
}
// randn * scale, each value exactly a bf16 (or, fp16, an fp16: all 11 of its significant bits drawn)
static std::vector<float> randn_16bit_values(size_t n, float scale, std::mt19937_64& rng, bool fp16) {
    if (!fp16) {
        std::vector<floatX> h(n);
        fill_randn_bf16(h, scale, rng);
        return to_float(h);
    }
    std::vector<float> f(n);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& x : f) x = round_to_fp16(dist(rng) * scale);
    return f;
}

// device buffers of one case: q, k, v (one buffer with layout=qkv), out, dout, dq, dk, dv (one with qkv), lse, scratch
struct CaseBuffers {
    GeneralCase c;
    LayoutTensor q, kv, o;
    size_t k_base = 0, v_base = 0;   // offsets of K and V in their buffer (qkv: inside the fused one)
    floatX *d_q, *d_k, *d_v, *d_out, *d_dout, *d_dq, *d_dk, *d_dv;
    float* d_lse;
    void* d_scratch = nullptr;
    size_t scratch_bytes = 0;
    std::vector<int> seqlens;   // kv_lens / keylens: sequence b's keys, on the device too
    int* d_seqlens = nullptr;
    GeneralExtras ref_x;        // the reference's view of the extras: per-sequence lengths, the bias (host floats)
    // a bias's values, (Bb, Hb, Tb, Tk) with the broadcast dimensions of size 1, its strides and device buffers
    struct Bias {
        BiasSpec spec;
        std::vector<float> values;
        AttentionStrides st{};
        void *d = nullptr, *d_grad = nullptr;
        size_t bytes() const { return values.size() * (spec.fp32 ? 4 : 2); }
    } bias, bias2;
    uint8_t* d_keymask = nullptr;   // (B, Tk)
    float* d_alibi = nullptr;       // ALiBi slopes (NH) or (B, NH)
    floatX *d_gate = nullptr, *d_gated_out = nullptr, *d_dgate = nullptr;   // gating: (B, T, NH, HS) in O's layout
    int* d_doc_start = nullptr;   // document masking: (B, T)
    unsigned long long dropout_seed = 0, dropout_offset = 0;   // drawn afresh by fill_extras
    int *d_cu_q = nullptr, *d_cu_k = nullptr;
    explicit CaseBuffers(const GeneralCase& c_) : c(c_) {
        const GeneralShape& s = c.s;
        ref_x.window_left = c.window_left, ref_x.window_right = c.window_right;
        ref_x.softcap = c.softcap;
        ref_x.fp16 = c.fp16;
        if (c.alibi) {
            ref_x.alibi.resize((size_t)(c.alibi == 2 ? s.B : 1) * s.NH);
            ref_x.alibi_batch = c.alibi == 2 ? s.NH : 0;
            d_alibi = device_alloc<float>(ref_x.alibi.size());
        }
        if (c.kv_lens || c.keylens) {   // keylens: 0, 1 and Tk among them
            for (int b = 0; b < s.B; b++)
                seqlens.push_back(c.kv_lens ? std::max(s.T, s.Tk - (b * 997) % s.Tk) : b == 1 ? 0 : b == 2 ? 1 : s.Tk - (b * 613) % s.Tk);
            d_seqlens = device_alloc<int>(s.B);
            to_device(d_seqlens, seqlens);
            ref_x.Tk_b = seqlens;
        }
        q = layout_tensor(c.layout, s.B, s.T, s.NH, s.HS);
        kv = layout_tensor(c.layout, s.B, s.Tk, s.NH_kv, s.HS);
        o = layout_tensor(c.layout == "qkv" ? "bthd" : c.layout, s.B, s.T, s.NH, s.HS);
        if (c.varlen) {   // ragged lengths, the longest T (Tk) first, a sequence of 1 where B > 2; self-attention keeps T_b = Tk_b
            for (int b = 0; b < s.B; b++) {   // varlen=2: all T (Tk)
                const bool full = c.varlen == 2 || b == 0;
                ref_x.T_b.push_back(full ? s.T : b == 2 ? 1 : std::max(1, s.T - (b * 797) % s.T));
                ref_x.Tk_b.push_back(s.T == s.Tk ? ref_x.T_b.back() : full ? s.Tk : b == 2 ? 1 : std::max(1, s.Tk - (b * 383) % s.Tk));
            }
            q = o = packed_tensor(ref_x.T_b, s.NH, s.HS);
            kv = packed_tensor(ref_x.Tk_b, s.NH_kv, s.HS);
            d_cu_q = device_alloc<int>(s.B + 1); to_device(d_cu_q, q.cu);
            d_cu_k = device_alloc<int>(s.B + 1); to_device(d_cu_k, kv.cu);
        }
        if (c.docs) d_doc_start = device_alloc<int>((size_t)s.B * s.T);
        if (c.gate) { d_gate = device_alloc<floatX>(o.elems); d_gated_out = device_alloc<floatX>(o.elems); d_dgate = device_alloc<floatX>(o.elems); }
        bias.spec = {c.bias, c.bias_fp32, c.dbias};
        bias2.spec = c.bias2;
        for (Bias* bi : {&bias, &bias2}) {
            const std::string& sh = bi->spec.shape;
            if (sh == "none") continue;
            const bool bb = sh[0] == 'b', hb = sh[1] == 'h', tb = sh[2] == 't';
            const long long Tb = tb ? s.T : 1, Hb = hb ? s.NH : 1, Bb = bb ? s.B : 1;
            bi->st = {bb ? Hb * Tb * s.Tk : 0, tb ? (long long)s.Tk : 0, hb ? Tb * s.Tk : 0};
            bi->values.resize((size_t)Bb * Hb * Tb * s.Tk);
            bi->d = device_alloc<uint8_t>(bi->bytes());
            if (bi->spec.grad) bi->d_grad = device_alloc<uint8_t>(bi->bytes());
        }
        if (!bias.values.empty()) { ref_x.bias = bias.values.data(); ref_x.bias_b = bias.st.batch; ref_x.bias_h = bias.st.head; ref_x.bias_q = bias.st.row; }
        if (!bias2.values.empty()) { ref_x.bias2 = bias2.values.data(); ref_x.bias2_b = bias2.st.batch; ref_x.bias2_h = bias2.st.head; ref_x.bias2_q = bias2.st.row; }
        if (c.keymask) d_keymask = device_alloc<uint8_t>((size_t)s.B * s.Tk);
        if (c.layout == "qkv") {   // one buffer for Q, K, V and one for dQ, dK, dV
            k_base = (size_t)s.NH * s.HS; v_base = 2 * k_base;
            d_q = d_k = d_v = device_alloc<floatX>(q.elems);
            d_dq = d_dk = d_dv = device_alloc<floatX>(q.elems);
        } else {
            d_q = device_alloc<floatX>(q.elems); d_k = device_alloc<floatX>(kv.elems); d_v = device_alloc<floatX>(kv.elems);
            d_dq = device_alloc<floatX>(q.elems); d_dk = device_alloc<floatX>(kv.elems); d_dv = device_alloc<floatX>(kv.elems);
        }
        d_out = device_alloc<floatX>(o.elems); d_dout = device_alloc<floatX>(o.elems);
        d_lse = device_alloc<float>((size_t)s.B * s.NH * s.T);
        if (c.bwd) { scratch_bytes = attention_backward_scratch_bytes(bwd()); d_scratch = device_alloc<uint8_t>(scratch_bytes); }
    }
    AttentionExtras extras() const {
        AttentionExtras x{bias.d, bias.st, c.bias_fp32, c.keylens ? d_seqlens : nullptr, d_cu_q, d_cu_k, d_gate, o.st, d_gated_out,
                          d_doc_start, c.varlen ? q.cu.back() : 0, c.varlen ? kv.cu.back() : 0, bias2.d, bias2.st, bias2.spec.fp32,
                          d_keymask, c.s.Tk};
        x.window = c.window_left >= 0 || c.window_right >= 0;
        x.window_left = c.window_left, x.window_right = c.window_right;
        x.softcap = (float)c.softcap;
        x.alibi_slopes = d_alibi, x.alibi_batch = ref_x.alibi_batch;
        x.dropout_p = (float)c.dropout, x.dropout_seed = dropout_seed, x.dropout_offset = dropout_offset;
        return x;
    }
    AttentionForwardParams fwd() const {
        const GeneralShape& s = c.s;
        return {d_q, d_k + k_base, d_v + v_base, d_out, d_lse, q.st, kv.st, kv.st, o.st, s.B, s.T, s.Tk, s.NH, s.NH_kv, s.HS, s.causal,
                (float)s.scale, extras(), c.fp16};
    }
    AttentionBackwardParams bwd() const {
        const GeneralShape& s = c.s;
        return {d_dq, d_dk + k_base, d_dv + v_base, d_scratch, d_dout, d_q, d_k + k_base, d_v + v_base, d_out, d_lse,
                q.st, kv.st, kv.st, o.st, o.st, q.st, kv.st, kv.st, s.B, s.T, s.Tk, s.NH, s.NH_kv, s.HS, s.causal, (float)s.scale,
                extras(), bias.d_grad, d_dgate, nullptr, bias2.d_grad, c.fp16};
    }
    // fresh document starts: a new document at each position with probability 1/40, and at 0
    void fill_documents(std::mt19937_64& rng) {
        if (!c.docs) return;
        std::uniform_int_distribution<int> u(0, 39);
        ref_x.doc_start.assign((size_t)c.s.B * c.s.T, 0);
        for (int b = 0; b < c.s.B; b++)
            for (int t = 1; t < c.s.T; t++) {
                const size_t i = (size_t)b * c.s.T + t;
                ref_x.doc_start[i] = u(rng) == 0 ? t : ref_x.doc_start[i - 1];
            }
        to_device(d_doc_start, ref_x.doc_start);
    }
    // fresh extras: the document starts, the biases' values (bf16-exact either way; mask: 10% of the first's -inf, and
    // every row 7i + 3 where it has rows), the key mask (10% of the keys at random, every key of sequence 1, all but key
    // 0 of sequence 2)
    void fill_extras(std::mt19937_64& rng) {
        fill_documents(rng);
        if (c.dropout > 0.0) dropout_seed = rng(), dropout_offset = rng() >> 20;   // a fresh seed and offset
        if (c.alibi) {   // alibi=1: the geometric slopes 2^(-8 (h + 1) / NH); alibi=2: random ones in (0, 1) per (b, h); 3: 0
            std::uniform_real_distribution<float> slope(0.0f, 1.0f);
            for (size_t i = 0; i < ref_x.alibi.size(); i++)
                ref_x.alibi[i] = c.alibi == 2 ? slope(rng) : c.alibi == 3 ? 0.0f : std::exp2(-8.0f * (float)(i % c.s.NH + 1) / c.s.NH);
            to_device(d_alibi, ref_x.alibi);
        }
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (Bias* bi : {&bias, &bias2}) {
            if (bi->values.empty()) continue;
            const long long row = bi->st.row ? bi->st.row : 0;
            for (size_t i = 0; i < bi->values.size(); i++) {
                bi->values[i] = (float)(floatX)dist(rng);
                if (bi == &bias && c.mask && (u(rng) < 0.1f || (row && (i / row) % 7 == 3))) bi->values[i] = -INFINITY;
            }
            if (bi->spec.fp32) to_device((float*)bi->d, bi->values);
            else { std::vector<floatX> h(bi->values.size()); for (size_t i = 0; i < h.size(); i++) h[i] = (floatX)bi->values[i]; to_device((floatX*)bi->d, h); }
        }
        if (c.keymask) {
            ref_x.key_mask.assign((size_t)c.s.B * c.s.Tk, 1);
            for (int b = 0; b < c.s.B; b++)
                for (int j = 0; j < c.s.Tk; j++) ref_x.key_mask[(size_t)b * c.s.Tk + j] = b == 1 ? 0 : b == 2 ? j == 0 : u(rng) >= 0.1f;
            to_device(d_keymask, ref_x.key_mask);
        }
    }
    // the reference's dropout mask, from the kernels' function of (seed, offset, b, h, i, j) (within each sequence)
    void dropout_reference() {
        if (c.dropout <= 0.0) return;
        const Dropout d = attention_dropout(extras());
        const GeneralShape& s = c.s;
        ref_x.dropout_keep.assign((size_t)s.B * s.NH * s.T * s.Tk, 0);
        for (int b = 0; b < s.B; b++)
            for (int h = 0; h < s.NH; h++)
                for (int i = 0; i < general_seq_T(s, &ref_x, b); i++)
                    for (int j = 0; j < general_seq_Tk(s, &ref_x, b); j++)
                        ref_x.dropout_keep[(((size_t)b * s.NH + h) * s.T + i) * s.Tk + j] = dropout_keep(d, b * s.NH + h, i, j);
        ref_x.dropout_scale = 1.0 / (1.0 - (double)(float)c.dropout);
    }
    void forward(cudaStream_t stream) const {
        if (c.kv_lens) attention_forward_kvcache(fwd(), d_seqlens, stream);
        else attention_forward(fwd(), stream);
    }
    void poison_grads() const {
        if (c.layout == "qkv") { poison(d_dq, q.elems * 2); return; }
        poison(d_dq, q.elems * 2); poison(d_dk, kv.elems * 2); poison(d_dv, kv.elems * 2);
    }
    void free_all() {
        for (void* p : {(void*)d_out, (void*)d_dout, (void*)d_lse, d_scratch, (void*)d_q, (void*)d_dq, (void*)d_seqlens, bias.d, bias.d_grad,
                        bias2.d, bias2.d_grad, (void*)d_keymask, (void*)d_alibi,
                        (void*)d_cu_q, (void*)d_cu_k, (void*)d_gate, (void*)d_gated_out, (void*)d_dgate, (void*)d_doc_start})
            if (p) cudaCheck(cudaFree(p));
        if (c.layout != "qkv") for (void* p : {(void*)d_k, (void*)d_v, (void*)d_dk, (void*)d_dv}) cudaCheck(cudaFree(p));
    }
};

// describes a flat index of a logical (B, T, H, HS) tensor
struct DescribeBTHD {
    int T, H, HS;
    void operator()(size_t i, char* buf) const {
        snprintf(buf, 128, "(b=%zu, t=%zu, h=%zu, d=%zu)", i / ((size_t)T * H * HS), i / ((size_t)H * HS) % T, i / HS % H, i % HS);
    }
};

// LSE: -inf exactly where the reference has -inf (rows that see no key), else lse_check's relative bound
static bool general_lse_check(std::vector<float> got, std::vector<float> ref, const GeneralShape& s) {
    size_t wrong_inf = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (std::isinf(ref[i]) || std::isinf(got[i])) { wrong_inf += got[i] != ref[i]; got[i] = ref[i] = 0.0f; }
    const bool ok = lse_check(got.data(), ref.data(), got.size(), [&](size_t i, char* b) {
        snprintf(b, 128, "(b=%zu, h=%zu, t=%zu)", i / ((size_t)s.NH * s.T), i / s.T % s.NH, i % s.T); });
    if (wrong_inf) printf("  lse  %zu rows -inf in one and not the other FAIL\n", wrong_inf);
    return ok && wrong_inf == 0;
}

static std::string case_name(const GeneralCase& c) {
    char buf[160];
    const GeneralShape& s = c.s;
    snprintf(buf, sizeof buf, "b=%d h=%d hkv=%d tq=%d tk=%d d=%d causal=%d %s scale=%.3g%s", s.B, s.NH, s.NH_kv, s.T, s.Tk, s.HS,
             (int)s.causal, c.layout.c_str(), s.scale, c.bwd ? "" : " (forward only)");
    std::string name = buf;
    if (c.bias != "none") name += " bias=" + c.bias + (c.bias_fp32 ? " fp32" : " bf16") + (c.dbias ? " +dbias" : "") + (c.mask ? " +mask" : "");
    if (c.bias2.shape != "none") name += " bias2=" + c.bias2.shape + (c.bias2.fp32 ? " fp32" : " bf16") + (c.bias2.grad ? " +dbias2" : "");
    if (c.keymask) name += " keymask";
    if (c.keylens) name += " keylens";
    if (c.varlen) name += c.varlen == 2 ? " varlen=2" : " varlen";
    if (c.gate) name += " gate";
    if (c.docs) name += " docs";
    if (c.window_left >= 0 || c.window_right >= 0) name += " window=(" + std::to_string(c.window_left) + "," + std::to_string(c.window_right) + ")";
    if (c.softcap > 0.0) { char b[32]; snprintf(b, sizeof b, " softcap=%g", c.softcap); name += b; }
    if (c.alibi) name += c.alibi == 2 ? " alibi=(b,h)" : c.alibi == 3 ? " alibi=(h)=0" : " alibi=(h)";
    if (c.fp16) name += " fp16";
    if (c.dropout > 0.0) { char b[32]; snprintf(b, sizeof b, " dropout=%g", c.dropout); name += b; }
    return name;
}

// The gradients' constant in FlashAttention's rule has a floor of 1e-4: with Tk = 1 (or a row's only key) dQ and dK
// are exactly zero (P = 1, dS = P (dP - D) = 0), the naive computation gets zero as well, and a kernel's D from the
// bf16 O leaves ~1e-5. FlashAttention's own tests add the bf16 rounding of values near 0.3 (about 1e-3).
constexpr double kGradFloor = 1e-4;

// validates one case at one input scale; returns the number of failed checks
static int validate(CaseBuffers& bufs, float input_scale, std::mt19937_64& rng, cudaStream_t stream) {
    const GeneralCase& c = bufs.c;
    const GeneralShape& s = c.s;
    if (const char* why = c.bwd ? attention_backward_unsupported_reason(bufs.bwd()) : attention_unsupported_reason(bufs.fwd())) {
        printf("  unsupported: %s FAIL\n", why);
        return 1;
    }
    const size_t nq = (size_t)s.B * s.T * s.NH * s.HS, nkv = (size_t)s.B * s.Tk * s.NH_kv * s.HS, nlse = (size_t)s.B * s.NH * s.T;
    const bool fp16 = c.fp16;
    const int atol_exp = fp16 ? -11 : -8;   // the rule's constant: the rounding of the largest value in the call's dtype
    std::vector<float> q = randn_16bit_values(nq, input_scale, rng, fp16), k = randn_16bit_values(nkv, input_scale, rng, fp16);
    std::vector<float> v = randn_16bit_values(nkv, 1.0f, rng, fp16), dout = randn_16bit_values(nq, 1.0f, rng, fp16);
    // fill every buffer (the gaps of a layout too) with random values first, so nothing reads zeros by luck
    auto upload = [&](floatX* d, const LayoutTensor& lt, const std::vector<std::pair<size_t, const std::vector<float>*>>& parts, int T, int H) {
        std::vector<floatX> h(lt.elems);
        fill_randn_bf16(h, 1.0f, rng);
        for (auto& pt : parts) scatter(h, pt.first, lt, *pt.second, s.B, T, H, s.HS, fp16);
        to_device(d, h);
    };
    if (c.layout == "qkv") upload(bufs.d_q, bufs.q, {{0, &q}, {bufs.k_base, &k}, {bufs.v_base, &v}}, s.T, s.NH);
    else {
        upload(bufs.d_q, bufs.q, {{0, &q}}, s.T, s.NH);
        upload(bufs.d_k, bufs.kv, {{0, &k}}, s.Tk, s.NH_kv);
        upload(bufs.d_v, bufs.kv, {{0, &v}}, s.Tk, s.NH_kv);
    }
    upload(bufs.d_dout, bufs.o, {{0, &dout}}, s.T, s.NH);
    std::vector<float> gate;
    if (c.gate) { gate = randn_16bit_values(nq, 1.0f, rng, fp16); upload(bufs.d_gate, bufs.o, {{0, &gate}}, s.T, s.NH); }

    bufs.fill_extras(rng);
    bufs.dropout_reference();
    const GeneralExtras* x = &bufs.ref_x;
    int failed = 0;
    if (c.dropout > 0.0) {   // the mask keeps 1 - threshold / 256 of the probabilities: within 5 sigma of it
        const Dropout d = attention_dropout(bufs.extras());
        size_t kept = 0, n = 0;
        for (int b = 0; b < s.B; b++) for (int h = 0; h < s.NH; h++) for (int i = 0; i < general_seq_T(s, x, b); i++)
            for (int j = 0; j < general_seq_Tk(s, x, b); j++, n++) kept += x->dropout_keep[(((size_t)b * s.NH + h) * s.T + i) * s.Tk + j];
        const double want = 1.0 - d.threshold / 256.0, got = n ? (double)kept / n : want, sigma = std::sqrt(want * (1.0 - want) / std::max<size_t>(n, 1));
        const bool ok = std::fabs(got - want) <= 5.0 * sigma + 1e-12;
        printf("  dropout kept %.4f of %zu (expected %.4f, 5 sigma %.4f) %s\n", got, n, want, 5.0 * sigma, ok ? "ok" : "FAIL");
        failed += !ok;
    }
    std::vector<float> ref_out(nq), ref_lse(nlse), naive_out(nq);
    attention_forward_cpu_general(ref_out.data(), ref_lse.data(), q.data(), k.data(), v.data(), s, false, x);
    attention_forward_cpu_general(naive_out.data(), nullptr, q.data(), k.data(), v.data(), s, true, x);
    poison(bufs.d_out, bufs.o.elems * 2); poison(bufs.d_lse, nlse * 4);
    if (c.gate) poison(bufs.d_gated_out, bufs.o.elems * 2);
    bufs.forward(stream);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(stream));
    const std::vector<float> got_out = gather(from_device(bufs.d_out, bufs.o.elems), 0, bufs.o, s.B, s.T, s.NH, s.HS, fp16);
    failed += !fa_rule_check("out", got_out.data(), ref_out.data(), naive_out.data(), nq, DescribeBTHD{s.T, s.NH, s.HS}, true, 0.0, atol_exp);
    std::vector<float> got_lse = from_device(bufs.d_lse, nlse);
    for (int b = 0; b < s.B; b++)   // LSE rows past a packed sequence's length are not written
        for (int h = 0; h < s.NH; h++)
            for (int t = general_seq_T(s, x, b); t < s.T; t++) got_lse[lse_index(b, h, t, s.T, s.NH)] = ref_lse[lse_index(b, h, t, s.T, s.NH)];
    failed += !general_lse_check(got_lse, ref_lse, s);
    std::vector<float> dout_eff = dout;   // gating: the attention's dO = dout * gate
    if (c.gate) {
        std::vector<float> ref_y(nq), naive_y(nq);
        for (size_t i = 0; i < nq; i++) {
            ref_y[i] = ref_out[i] * gate[i]; naive_y[i] = (float)round_like_16bit(naive_out[i] * gate[i], x); dout_eff[i] = dout[i] * gate[i];
        }
        const std::vector<float> got_y = gather(from_device(bufs.d_gated_out, bufs.o.elems), 0, bufs.o, s.B, s.T, s.NH, s.HS, fp16);
        failed += !fa_rule_check("out*gate", got_y.data(), ref_y.data(), naive_y.data(), nq, DescribeBTHD{s.T, s.NH, s.HS}, true, 0.0, atol_exp);
    }
    if (!c.bwd) return failed;

    std::vector<float> ref_dq(nq), ref_dk(nkv), ref_dv(nkv), naive_dq(nq), naive_dk(nkv), naive_dv(nkv);
    const bool any_dbias = c.dbias || c.bias2.grad;
    std::vector<float> ref_ds(any_dbias ? (size_t)s.B * s.NH * s.T * s.Tk : 0), naive_ds(ref_ds.size());
    attention_backward_cpu_general(ref_dq.data(), ref_dk.data(), ref_dv.data(), dout_eff.data(), q.data(), k.data(), v.data(), s, false, x,
                                   any_dbias ? ref_ds.data() : nullptr);
    attention_backward_cpu_general(naive_dq.data(), naive_dk.data(), naive_dv.data(), dout_eff.data(), q.data(), k.data(), v.data(), s, true, x,
                                   any_dbias ? naive_ds.data() : nullptr, naive_out.data());
    // a bias's gradient: dS summed over its broadcast dimensions (in double; the naive sum rounded to the bias's dtype)
    struct Grad { const CaseBuffers::Bias* bias; const char* name; std::vector<float> ref, naive, first; };
    std::vector<Grad> grads;
    for (const CaseBuffers::Bias* bi : {&bufs.bias, &bufs.bias2}) {
        if (!bi->spec.grad) continue;
        std::vector<double> r(bi->values.size(), 0.0), n(bi->values.size(), 0.0);
        for (int b = 0; b < s.B; b++) for (int h = 0; h < s.NH; h++) for (int i = 0; i < s.T; i++) for (int j = 0; j < s.Tk; j++) {
            const size_t from = (((size_t)b * s.NH + h) * s.T + i) * s.Tk + j;
            const size_t to = b * bi->st.batch + h * bi->st.head + i * bi->st.row + j;
            r[to] += ref_ds[from]; n[to] += naive_ds[from];
        }
        Grad gr{bi, bi == &bufs.bias ? "dbias" : "dbias2", std::vector<float>(r.size()), std::vector<float>(r.size()), {}};
        for (size_t i = 0; i < r.size(); i++) { gr.ref[i] = (float)r[i]; gr.naive[i] = bi->spec.fp32 ? (float)n[i] : round_to_bf16((float)n[i]); }
        grads.push_back(std::move(gr));
    }
    auto grad_values = [&](const CaseBuffers::Bias& bi) {   // the device's gradient as floats
        if (bi.spec.fp32) return from_device((float*)bi.d_grad, bi.values.size());
        return to_float(from_device((floatX*)bi.d_grad, bi.values.size()));
    };
    std::vector<floatX> first_q, first_kv[2];
    for (int run = 0; run < 2; run++) {   // the second run must be bit-identical (deterministic backward)
        bufs.poison_grads(); poison(bufs.d_scratch, bufs.scratch_bytes);
        for (const Grad& gr : grads) poison(gr.bias->d_grad, gr.bias->bytes());
        if (c.gate) poison(bufs.d_dgate, bufs.o.elems * 2);
        attention_backward(bufs.bwd(), stream);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaStreamSynchronize(stream));
        std::vector<floatX> hq = from_device(bufs.d_dq, bufs.q.elems);
        std::vector<floatX> hk = c.layout == "qkv" ? hq : from_device(bufs.d_dk, bufs.kv.elems);
        std::vector<floatX> hv = c.layout == "qkv" ? hq : from_device(bufs.d_dv, bufs.kv.elems);
        if (run == 0) {
            const std::vector<float> dq = gather(hq, 0, bufs.q, s.B, s.T, s.NH, s.HS, fp16);
            const std::vector<float> dk = gather(hk, bufs.k_base, bufs.kv, s.B, s.Tk, s.NH_kv, s.HS, fp16);
            const std::vector<float> dv = gather(hv, bufs.v_base, bufs.kv, s.B, s.Tk, s.NH_kv, s.HS, fp16);
            failed += !fa_rule_check("dq", dq.data(), ref_dq.data(), naive_dq.data(), nq, DescribeBTHD{s.T, s.NH, s.HS}, true, kGradFloor, atol_exp);
            failed += !fa_rule_check("dk", dk.data(), ref_dk.data(), naive_dk.data(), nkv, DescribeBTHD{s.Tk, s.NH_kv, s.HS}, true, kGradFloor, atol_exp);
            failed += !fa_rule_check("dv", dv.data(), ref_dv.data(), naive_dv.data(), nkv, DescribeBTHD{s.Tk, s.NH_kv, s.HS}, true, kGradFloor, atol_exp);
            first_q = hq; first_kv[0] = hk; first_kv[1] = hv;
            if (c.gate) {   // dgate = dout * O
                std::vector<float> ref_dg(nq), naive_dg(nq);
                for (size_t i = 0; i < nq; i++) { ref_dg[i] = dout[i] * ref_out[i]; naive_dg[i] = (float)round_like_16bit(dout[i] * naive_out[i], x); }
                const std::vector<float> dg = gather(from_device(bufs.d_dgate, bufs.o.elems), 0, bufs.o, s.B, s.T, s.NH, s.HS, fp16);
                failed += !fa_rule_check("dgate", dg.data(), ref_dg.data(), naive_dg.data(), nq, DescribeBTHD{s.T, s.NH, s.HS}, true, kGradFloor, atol_exp);
            }
            for (Grad& gr : grads) {
                gr.first = grad_values(*gr.bias);
                failed += !fa_rule_check(gr.name, gr.first.data(), gr.ref.data(), gr.naive.data(), gr.first.size(), [&](size_t i, char* b) {
                    snprintf(b, 128, "(element %zu of the broadcast bias)", i); }, true, kGradFloor);
            }
        } else {
            bool same = memcmp(hq.data(), first_q.data(), hq.size() * 2) == 0 && memcmp(hk.data(), first_kv[0].data(), hk.size() * 2) == 0 &&
                        memcmp(hv.data(), first_kv[1].data(), hv.size() * 2) == 0;
            for (const Grad& gr : grads) {
                const std::vector<float> again = grad_values(*gr.bias);
                same = same && memcmp(again.data(), gr.first.data(), again.size() * 4) == 0;
            }
            printf("  backward run twice: %s\n", same ? "bit-identical ok" : "DIFFERENT FAIL");
            failed += !same;
        }
    }
    return failed;
}

int main(int argc, char** argv) {
    bool check = false, bench = false, quick = false, x8 = false, fp16 = false, bf16_values = false;
    int shard = 0, shards = 1;
    uint64_t seed = 0;
    int repeats = 30;
    std::vector<GeneralCase> cases;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--check") check = true;
        else if (a == "--bench") bench = true;
        else if (a == "--quick") quick = true;
        else if (a == "--x8") x8 = true;
        else if (a == "--fp16") fp16 = true;
        else if (a == "--bf16-values") bf16_values = true;
        else if (a == "--seed" && i + 1 < argc) seed = strtoull(argv[++i], nullptr, 10);
        else if (a == "--repeats" && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (a == "--schedule" && i + 1 < argc && (!strcmp(argv[i + 1], "static") || !strcmp(argv[i + 1], "dynamic")))
            attention_tuning().schedule = !strcmp(argv[++i], "static") ? AttentionTuning::kRoundRobin : AttentionTuning::kClaimed;
        else if (a == "--pdl" && i + 1 < argc) attention_tuning().pdl = atoi(argv[++i]) != 0;
        else if (a == "--dbias-slots" && i + 1 < argc) attention_tuning().dbias_slots = atoi(argv[++i]);
        else if (a == "--sync-each") timing_sync_each() = true;
        else if (a == "--shard" && i + 1 < argc && sscanf(argv[i + 1], "%d/%d", &shard, &shards) == 2 && shard >= 0 && shard < shards) i++;
        else if (a.find('=') != std::string::npos) cases.push_back(parse_case(a));
        else { fprintf(stderr, "usage: %s [--check [--quick]] [--x8] [--bench] [--fp16] [--bf16-values] [--seed S] [--repeats R] [--schedule static|dynamic] [--pdl 0|1] [--dbias-slots N] [--sync-each] [--shard I/N] [case ...]\n", argv[0]); return 1; }
    }
    if (check)   // --shard I/N: every N-th validation case from the I-th (make test runs three shards side by side)
        for (size_t i = 0; i < std::size(kValidationCases); i++)
            if ((int)(i % shards) == shard) cases.push_back(parse_case(kValidationCases[i]));
    if (bench) for (const char* c : kBenchCases) cases.push_back(parse_case(c));
    if (fp16) for (GeneralCase& c : cases) c.fp16 = true;   // --fp16: every case in fp16
    if (cases.empty()) { fprintf(stderr, "nothing to do: --check, --bench or a case\n"); return 1; }
    if (seed == 0) seed = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    print_device_banner();
    printf("seed %llu (fresh inputs every run; pass --seed to repeat one)\n", (unsigned long long)seed);
    printf("checks: out, dq, dk, dv against the CPU fp64 reference, FlashAttention's rule (gradients' constant at least %g); lse relative 1e-4, -inf where no key is seen\n", kGradFloor);
    std::mt19937_64 rng(seed);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    if (!check) {   // the HBM bandwidth decoding is judged against: a 1 GiB device-to-device copy (read + write)
        const size_t bytes = 1ull << 30;
        uint8_t *src = device_alloc<uint8_t>(bytes), *dst = device_alloc<uint8_t>(bytes);
        const Timing tc = time_kernel([&](int) { cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); }, 10, stream);
        printf("RESULT hbm_copy GB/s=%.0f (1 GiB device-to-device, read + write)\n", 2.0 * bytes / (tc.median_ms * 1e-3) / 1e9);
        cudaCheck(cudaFree(src)); cudaCheck(cudaFree(dst));
    }
    int passed = 0, failed = 0;
    std::vector<std::string> results;
    for (const GeneralCase& c : cases) {
        const GeneralShape& s = c.s;
        if (!attention_head_dim_compiled(s.HS) && !hopper_path_available()) {   // the padded head dims run on Hopper only
            printf("\n=== %s: skipped (head dim %d needs sm_90a)\n", case_name(c).c_str(), s.HS);
            results.push_back(case_name(c) + "  skipped");
            continue;
        }
        CaseBuffers bufs(c);
        // cases too big for the CPU reference are timed only (the validation set covers their features at smaller
        // sizes), unless --x8 asks for their validation
        if (check || x8 || (double)s.B * s.NH * s.T * s.Tk * s.HS < 2e9) {
            for (float input_scale : (check && !quick) || x8 ? std::vector<float>{1.0f, 8.0f} : std::vector<float>{1.0f}) {
                printf("\n=== %s, inputs randn x %g\n", case_name(c).c_str(), input_scale);
                const int f = validate(bufs, input_scale, rng, stream);
                f ? failed++ : passed++;
                results.push_back(case_name(c) + (input_scale != 1.0f ? " x8" : " x1") + (f ? "  FAIL" : "  ok"));
            }
        }
        if (!check) {
            bufs.fill_extras(rng);
            for (std::pair<floatX*, size_t> t : {std::make_pair(bufs.d_q, bufs.q.elems), std::make_pair(bufs.d_k, bufs.kv.elems),
                                                 std::make_pair(bufs.d_v, bufs.kv.elems), std::make_pair(bufs.d_dout, bufs.o.elems),
                                                 std::make_pair(bufs.d_gate, bufs.o.elems)})
                if (t.first) fill_uniform_16bit<<<1024, 256, 0, stream>>>(t.first, t.second, rng(), 1.0f, c.fp16, bf16_values);
            cudaCheck(cudaGetLastError());
            const double flops = forward_flops(s, bufs.ref_x);
            const Timing tf = time_kernel([&](int) { bufs.forward(stream); }, repeats, stream);
            printf("RESULT attention_general %s fwd ms=%.4f tflops=%.1f", case_name(c).c_str(), tf.median_ms, flops / (tf.median_ms * 1e-3) / 1e12);
            if (s.T * (s.NH / s.NH_kv) <= 16) {   // decoding: the K and V bytes read, as the anchor script counts them
                const double kv_bytes = 2.0 * s.B * s.Tk * s.NH_kv * s.HS * 2;
                printf(" kv_gbs=%.0f", kv_bytes / (tf.median_ms * 1e-3) / 1e9);
            }
            if (c.bwd) {
                const Timing tb = time_kernel([&](int) { attention_forward(bufs.fwd(), stream); attention_backward(bufs.bwd(), stream); }, repeats, stream);
                printf(" fwd+bwd ms=%.4f tflops=%.1f", tb.median_ms, 3.5 * flops / (tb.median_ms * 1e-3) / 1e12);
            }
            printf("\n");
        }
        bufs.free_all();
    }
    printf("\nattention_general validation:\n");
    for (const std::string& r : results) printf("  %s\n", r.c_str());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
