"""
Prepares tiny Shakespeare for train_gpt2cu: GPT-2 BPE token shards plus the GPT-2 tokenizer file, in llm.c's formats.

    python scripts/prepro_tinyshakespeare.py [--text PATH] [--ranks PATH] [--out_dir DIR] [--tokenizer_out FILE]

Inputs (defaults are relative to the repository root, i.e. they work from any working directory):
    --text   ../shared/data/tinyshakespeare.txt   the 1,115,394-byte corpus
    --ranks  ../shared/data/gpt2.tiktoken         GPT-2 BPE ranks, one "base64(token bytes) rank" per line (50,256 lines)
(when ../shared/data does not exist, shared/data inside the repository is tried too)
If an input file is missing it is downloaded from its canonical URL (only where a network exists) and its sha256 checked.

Outputs:
    DIR/tiny_shakespeare_val.bin     first 32,768 tokens            (default DIR = dev/data/tinyshakespeare)
    DIR/tiny_shakespeare_train.bin   the rest (305,260 tokens)
    FILE                             gpt2_tokenizer.bin             (default FILE = gpt2_tokenizer.bin in the repository root,
                                                                     where train_gpt2cu looks for it, as llm.c does)

Token shard: 256 int32 header (magic 20240520, version 1, token count, zeros) then uint16 token ids.
The text is split on blank lines ("\n\n"); every section is prefixed with <|endoftext|> (50256) and all but the last get
their "\n\n" back before encoding (no special tokens are parsed inside the text), as llm.c does.
Tokenizer: 256 uint32 header (magic 20240328, version 2, 50257 tokens, EOT id 50256) then per token id a uint8 length
and the raw token bytes (id 50256 is the 13 bytes "<|endoftext|>").

The encoder is tiktoken when it imports; otherwise a pure-Python byte-level BPE over the same rank file (needs the
`regex` module for \\p{L}/\\p{N}). Both give the same ids; `--check_encoders` encodes the whole corpus both ways and
compares (needs tiktoken). `--encoder python` forces the pure-Python path.
"""

import argparse
import array
import base64
import hashlib
import os
import struct
import sys
import urllib.request

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEXT_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TEXT_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
RANKS_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"  # GPT-2's ranks (tiktoken: gpt2 == r50k_base)
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"

# GPT-2's pre-tokenizer: contractions, letters, numbers, other symbols, whitespace (trailing space stays with the next word)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256
VOCAB_SIZE = 50257
VAL_TOKENS = 32768

DATA_MAGIC, DATA_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2

# -----------------------------------------------------------------------------
# inputs

def default_input(name):
    """../shared/data/NAME beside the repository, else shared/data/NAME inside it, else the first (to download to)."""
    candidates = [os.path.join(REPO_ROOT, "..", "shared", "data", name), os.path.join(REPO_ROOT, "shared", "data", name)]
    return next((c for c in candidates if os.path.exists(c)), candidates[0])

def ensure_file(path, url, sha256):
    """Returns path; downloads url there first (checking its sha256) if the file does not exist."""
    if os.path.exists(path):
        return path
    print(f"{path} not found, downloading {url}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    try:
        urllib.request.urlretrieve(url, tmp)
    except Exception as e:
        sys.exit(f"error: {path} is missing and the download from {url} failed ({e})")
    with open(tmp, "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    if got != sha256:
        os.remove(tmp)
        sys.exit(f"error: {url} has sha256 {got}, expected {sha256}")
    os.replace(tmp, path)
    return path

def load_ranks(path):
    """The .tiktoken rank file as {token bytes: rank}."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            b64, rank = line.split()
            ranks[base64.b64decode(b64)] = int(rank)
    if len(ranks) != EOT or sorted(ranks.values()) != list(range(EOT)):
        sys.exit(f"error: {path} should hold ranks 0..{EOT - 1} exactly once each, got {len(ranks)} entries")
    return ranks

# -----------------------------------------------------------------------------
# encoders: both expose encode_ordinary(str) -> list[int]

class PythonBPE:
    """Byte-level BPE: split with the GPT-2 pattern, then in every piece merge the adjacent pair whose concatenation
    has the lowest rank, until no adjacent pair is in the table. A token's id is its rank."""

    def __init__(self, ranks):
        try:
            import regex  # \p{L} and \p{N} are not in the standard re module
        except ImportError:
            sys.exit("error: the pure-Python encoder needs the `regex` module: pip install regex (or tiktoken)")
        self.ranks = ranks
        self.pattern = regex.compile(GPT2_PATTERN)
        self.cache = {}

    def encode_piece(self, piece):
        if piece in self.ranks:
            return [self.ranks[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best_rank, best_i = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get(parts[i] + parts[i + 1])
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank, best_i = r, i
            if best_rank is None:
                break
            parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
        return [self.ranks[p] for p in parts]

    def encode_ordinary(self, text):
        ids = []
        for m in self.pattern.finditer(text):
            piece = m.group().encode("utf-8")
            toks = self.cache.get(piece)
            if toks is None:
                toks = self.encode_piece(piece)
                self.cache[piece] = toks
            ids.extend(toks)
        return ids

def tiktoken_encoder(ranks_path):
    """tiktoken over the same rank file, or None if tiktoken is not installed."""
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        return None
    return tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_PATTERN,
                             mergeable_ranks=load_tiktoken_bpe(ranks_path),
                             special_tokens={"<|endoftext|>": EOT})

# -----------------------------------------------------------------------------
# outputs

def tokenize_sections(text, encode):
    """llm.c's tiny Shakespeare split: every blank-line-separated section starts with EOT."""
    sections = text.split("\n\n")
    tokens = []
    for i, s in enumerate(sections):
        tokens.append(EOT)
        tokens.extend(encode(s + "\n\n" if i != len(sections) - 1 else s))
    return tokens

def write_datafile(path, tokens):
    assert len(tokens) < 2**31 and all(0 <= t < VOCAB_SIZE for t in tokens)
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = DATA_MAGIC, DATA_VERSION, len(tokens)
    data = array.array("H", tokens)
    if sys.byteorder != "little":
        header.byteswap(); data.byteswap()
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(data.tobytes())
    print(f"wrote {path}: {len(tokens):,} tokens ({os.path.getsize(path):,} bytes)")

def write_tokenizer(path, ranks):
    id_to_bytes = {r: b for b, r in ranks.items()}
    id_to_bytes[EOT] = b"<|endoftext|>"
    header = array.array("I", [0] * 256)
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, VOCAB_SIZE, EOT
    if sys.byteorder != "little":
        header.byteswap()
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for i in range(VOCAB_SIZE):
            b = id_to_bytes[i]
            assert 1 <= len(b) <= 255, f"token {i} is {len(b)} bytes"
            f.write(struct.pack("<B", len(b)))
            f.write(b)
    print(f"wrote {path}: {VOCAB_SIZE} tokens ({os.path.getsize(path):,} bytes)")

# -----------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default=default_input("tinyshakespeare.txt"))
    p.add_argument("--ranks", default=default_input("gpt2.tiktoken"))
    p.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "dev", "data", "tinyshakespeare"))
    p.add_argument("--tokenizer_out", default=os.path.join(REPO_ROOT, "gpt2_tokenizer.bin"))
    p.add_argument("--encoder", choices=["auto", "tiktoken", "python"], default="auto",
                   help="auto: tiktoken if it imports, else pure Python")
    p.add_argument("--check_encoders", action="store_true",
                   help="also encode the corpus with the other encoder and require identical ids")
    args = p.parse_args()

    text_path = ensure_file(os.path.normpath(args.text), TEXT_URL, TEXT_SHA256)
    ranks_path = ensure_file(os.path.normpath(args.ranks), RANKS_URL, RANKS_SHA256)
    with open(text_path, "r", encoding="utf-8") as f:
        text = f.read()
    ranks = load_ranks(ranks_path)

    tk = tiktoken_encoder(ranks_path) if args.encoder in ("auto", "tiktoken") or args.check_encoders else None
    if args.encoder == "tiktoken" and tk is None:
        sys.exit("error: --encoder tiktoken but tiktoken is not installed")
    use_tk = tk is not None and args.encoder != "python"
    py = PythonBPE(ranks) if not use_tk or args.check_encoders else None
    encode = tk.encode_ordinary if use_tk else py.encode_ordinary
    print(f"encoder: {'tiktoken' if use_tk else 'pure-Python BPE'} over {ranks_path}")

    tokens = tokenize_sections(text, encode)
    if args.check_encoders:
        if tk is None:
            sys.exit("error: --check_encoders needs tiktoken")
        other = tokenize_sections(text, py.encode_ordinary if use_tk else tk.encode_ordinary)
        if other != tokens:
            i = next((i for i, (a, b) in enumerate(zip(tokens, other)) if a != b), min(len(tokens), len(other)))
            sys.exit(f"error: encoders differ at token {i} ({len(tokens)} vs {len(other)} tokens)")
        print(f"check: tiktoken and pure-Python BPE agree on all {len(tokens):,} tokens")

    print(f"total: {len(tokens):,} tokens from {len(text):,} characters")
    os.makedirs(args.out_dir, exist_ok=True)
    write_datafile(os.path.join(args.out_dir, "tiny_shakespeare_val.bin"), tokens[:VAL_TOKENS])
    write_datafile(os.path.join(args.out_dir, "tiny_shakespeare_train.bin"), tokens[VAL_TOKENS:])
    tok_dir = os.path.dirname(os.path.abspath(args.tokenizer_out))
    os.makedirs(tok_dir, exist_ok=True)
    write_tokenizer(args.tokenizer_out, ranks)

if __name__ == "__main__":
    main()
