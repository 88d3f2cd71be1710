// Token streams for language models: a text file as byte-level characters, llm.c's token shards, and windows over them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mpx::data {

/// A character vocabulary: the distinct bytes of a text, sorted, each mapped to its rank
/// (nanoGPT's shakespeare_char). Stored in a checkpoint as its `chars`, so a resumed or
/// generating run encodes and decodes exactly as the run that trained.
struct CharVocab {
  std::string chars;  ///< the vocabulary's bytes in id order
  /// The vocabulary of `text` (every distinct byte); throws on an empty text.
  static CharVocab from_text(const std::string& text);
  /// Rebuilds a stored vocabulary; throws when `chars` is empty or repeats a byte.
  static CharVocab from_chars(const std::string& chars);
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  /// Ids of `text`; a byte outside the vocabulary is an error naming it and its position.
  std::vector<int32_t> encode(const std::string& text) const;
  /// The text of `ids`; an id outside [0, size()) is an error.
  std::string decode(const std::vector<int64_t>& ids) const;
};

/// A read-only sequence of token ids in [0, vocab). Reads are const and safe from several
/// threads at once (loader workers share one stream).
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual int64_t size() const = 0;
  /// Copies tokens [begin, begin + n) into `out` as i64; throws when the range leaves the stream
  /// or a token read is not below vocab_size().
  virtual void read(int64_t begin, int64_t n, int64_t* out) const = 0;
  /// One more than the largest id the stream may hold (the model's vocabulary must be at least this).
  virtual int64_t vocab_size() const = 0;
  /// Where the tokens came from, for messages ("input.txt", "3 shards under data/*.bin").
  virtual std::string describe() const = 0;
};

/// The bytes of a text file as character ids of `vocab` (or of the file's own vocabulary when
/// `vocab` is empty: it is then filled in, for the caller to store). Throws naming the file when
/// it is missing, cannot be read, is empty, or holds a byte outside a given vocabulary (with the
/// byte's offset). The ids are held in memory, one byte per character.
std::shared_ptr<TokenStream> open_text(const std::string& path, CharVocab& vocab);
/// The same for a text already in memory; `name` stands for it in messages and describe().
std::shared_ptr<TokenStream> text_tokens(const std::string& text, CharVocab& vocab, const std::string& name);

/// llm.c's token shards (`.bin`: a 256 x int32 little-endian header, magic 20240520, version 1,
/// the token count, then that many little-endian uint16 tokens), in the byte-wise sorted order of
/// the files matching `glob` (a file, or a POSIX glob pattern with * and ?), concatenated. Every
/// header is checked up front: no matching file, a file shorter than the header, a wrong magic or
/// version, a negative count, a count the file is too short or too long for is an mpx::Error
/// naming the file and the byte offset. The shards are memory-mapped, not read, so a token at or
/// above `vocab_size` is found when read() reaches it (an mpx::Error naming file and offset).
std::shared_ptr<TokenStream> open_token_shards(const std::string& glob, int64_t vocab_size = 50257);

/// Tokens [begin, end) of another stream (a validation tail, a held-out part).
std::shared_ptr<TokenStream> slice(std::shared_ptr<const TokenStream> s, int64_t begin, int64_t end);

/// Windows of `context + 1` tokens as (input, target) examples: example i is the tokens at
/// [i * stride, i * stride + context) as data (i64 [context]) and the same shifted by one as
/// target (i64 [context]). stride = context gives non-overlapping windows; random or
/// sequential order is the sampler's (RandomSampler / SequentialSampler / DistributedSampler,
/// so ranks read disjoint windows). get_batch fills [B, context] batches directly.
class TokenWindows : public Dataset {
 public:
  /// Throws when the stream holds fewer than context + 1 tokens, or context/stride < 1.
  TokenWindows(std::shared_ptr<const TokenStream> tokens, int64_t context, int64_t stride = 0 /* = context */);
  /// (N - context - 1) / stride + 1 for a stream of N tokens: every window whose shifted target
  /// fits; the tokens past the last one are left out.
  int64_t size() const override;
  Example<> get(int64_t index) const override;
  bool get_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>& sample_seeds,
                 Batch& out) const override;
  int64_t context() const { return context_; }
  int64_t stride() const { return stride_; }
  const TokenStream& tokens() const { return *tokens_; }

 private:
  std::shared_ptr<const TokenStream> tokens_;
  int64_t context_, stride_;
};

}  // namespace mpx::data
