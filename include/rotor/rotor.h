/* rotor.h: the C API of rotor, a CPU engine for Llama-family GGUF models
 * whose KV cache is a pluggable subsystem.
 *
 * C99 (and C++) compatible. Every object is an opaque handle made by a
 * rotor_X_new or rotor_X_load call and released by rotor_X_free (freeing NULL
 * is a no-op).
 *
 * Errors: every call that can fail returns a `rotor_status *`: NULL on success,
 * otherwise an error whose code and message say what went wrong, naming the
 * file, option or value ("rotor: kv option 'kv_size': 0 out of range [1,
 * 512]"). The caller owns it and frees it with rotor_status_free(). Getters
 * that cannot fail return their value directly (for a NULL handle: 0, -1 for
 * a token id, false or ""). No call throws, aborts or exits on bad input.
 *
 * Out-parameters are written on failure too: handles NULL, sequence ids -1,
 * counts 0, except that ROTOR_ERR_BUFFER_TOO_SMALL gives the size needed.
 *
 * Sequence ids are small integers, and a freed sequence's id is given to the
 * next new one: an id names its sequence only until rotor_seq_free.
 *
 * Thread safety (per call, also noted below):
 *  - rotor_version, rotor_status_*: any thread, any time.
 *  - A model and everything made from it (contexts, their sequences,
 *    rotor_generate) share one thread pool and one K/V block pool, so calls
 *    that compute or touch sequences take the model's lock: any thread may
 *    call them, calls on one model run one at a time. Tokenize, detokenize
 *    and the model getters read only immutable state: any thread, concurrently.
 *  - A rotor_kv_config and a rotor_sampler are plain objects: use each from
 *    one thread at a time.
 *  - Pointers returned by getters (logits, descriptions) stay valid until the
 *    next call that changes their object, as stated per call.
 *  - Free a model after everything made from it.
 *
 * The data path: rotor_model_load -> rotor_tokenize -> rotor_context_new +
 * rotor_seq_new(kv config) -> rotor_eval / rotor_eval_batch (chunked prefill,
 * KV plan/commit) -> rotor_logits -> rotor_sampler_sample -> rotor_eval(token)
 * ... or all of it in one call: rotor_generate with a streaming callback.
 */
#ifndef ROTOR_ROTOR_H_
#define ROTOR_ROTOR_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ROTOR_API
#else
#define ROTOR_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ---------------------------------------------------------- */

#define ROTOR_VERSION_MAJOR 0
#define ROTOR_VERSION_MINOR 9
#define ROTOR_VERSION_PATCH 0
/* Bumped when a declaration of this header changes incompatibly. */
#define ROTOR_API_VERSION 1

/* "0.9.0": the library's version (which may be newer than the header's). */
ROTOR_API const char *rotor_version(void);
/* ROTOR_API_VERSION of the library. */
ROTOR_API int rotor_api_version(void);

/* ---- Status ----------------------------------------------------------- */

typedef enum rotor_code {
  ROTOR_OK = 0,
  ROTOR_ERR_INVALID_ARGUMENT = 1, /* a bad option, value, handle or id */
  ROTOR_ERR_IO = 2,               /* a file that cannot be read, written or parsed */
  ROTOR_ERR_CONTEXT_FULL = 3,     /* tokens that do not fit the sequence's cache */
  ROTOR_ERR_OUT_OF_MEMORY = 4,    /* the K/V memory budget or the machine */
  ROTOR_ERR_BUFFER_TOO_SMALL = 5, /* an output buffer: the size needed is returned */
  ROTOR_ERR_CANCELLED = 6,        /* a callback asked to stop */
  ROTOR_ERR_INTERNAL = 7
} rotor_code;

typedef struct rotor_status rotor_status;

/* NULL (success) gives ROTOR_OK and "". */
ROTOR_API rotor_code rotor_status_code(const rotor_status *status);
ROTOR_API const char *rotor_status_message(const rotor_status *status);
ROTOR_API void rotor_status_free(rotor_status *status);

/* ---- Model ------------------------------------------------------------ */

typedef struct rotor_model rotor_model;

typedef struct rotor_model_params {
  int n_threads;          /* 0 = the machine's hardware threads */
  int n_ctx;              /* tokens per sequence, at most 16777216; 0 = the model's
                           * trained context (at most 131072) */
  int64_t kv_memory_mib;  /* all K/V of the model's sequences; 0 = a default for max_seqs */
  int max_seqs;           /* sequences expected at once (sizes the default K/V budget) */
  bool prefix_cache;      /* reuse the K/V of earlier prompts' beginnings */
  bool vocab_only;        /* the vocabulary alone (also a vocabulary-only GGUF): tokens
                           * and token queries work, n_ctx is 0, and every call that
                           * needs weights fails with ROTOR_ERR_INVALID_ARGUMENT */
} rotor_model_params;

/* The CLI's defaults: all threads, trained context, 1 sequence, prefix cache on,
 * weights loaded. */
ROTOR_API rotor_model_params rotor_model_default_params(void);

/* Maps a GGUF file and loads its vocabulary. params may be NULL (defaults).
 * Errors name the file and what is wrong with it. */
ROTOR_API rotor_status *rotor_model_load(const char *path, const rotor_model_params *params,
                                         rotor_model **out);
ROTOR_API void rotor_model_free(rotor_model *model);

ROTOR_API int32_t rotor_model_n_vocab(const rotor_model *model);
ROTOR_API int32_t rotor_model_n_ctx(const rotor_model *model);       /* per sequence */
/* The trained context (also for vocab_only, where the file gives it; else 0). */
ROTOR_API int32_t rotor_model_n_ctx_train(const rotor_model *model);
ROTOR_API int32_t rotor_model_token_bos(const rotor_model *model);   /* -1: none */
ROTOR_API int32_t rotor_model_token_eos(const rotor_model *model);   /* -1: none */
/* True for every token that ends generation (eos, eot, ...). */
ROTOR_API bool rotor_model_token_is_eog(const rotor_model *model, int32_t token);
/* "llama 292K F32, 5 layers, dim 64, ..."; valid while the model lives. */
ROTOR_API const char *rotor_model_description(const rotor_model *model);

/* ---- Tokens ----------------------------------------------------------- */

/* Encodes text[0, len) (UTF-8; invalid bytes are encoded one by one and
 * come back unchanged from rotor_detokenize). add_bos: a beginning-of-text token first,
 * where the vocabulary has one and wants it. parse_special: control-token
 * texts ("<|eot_id|>") become those tokens. Writes up to `capacity` ids;
 * *n_tokens receives the count the text needs (also when it does not fit:
 * then ROTOR_ERR_BUFFER_TOO_SMALL). Any thread. */
ROTOR_API rotor_status *rotor_tokenize(const rotor_model *model, const char *text, size_t len,
                                       bool add_bos, bool parse_special, int32_t *tokens,
                                       size_t capacity, size_t *n_tokens);

/* Decodes ids to UTF-8 text (not NUL-terminated unless room remains; a NUL is
 * then written after the text). *n_bytes receives the bytes the text needs;
 * ROTOR_ERR_BUFFER_TOO_SMALL when capacity is less. special: control tokens
 * as their text. An id out of range is an error naming it. Any thread. */
ROTOR_API rotor_status *rotor_detokenize(const rotor_model *model, const int32_t *tokens,
                                         size_t n_tokens, bool special, char *text,
                                         size_t capacity, size_t *n_bytes);

/* The bytes of one token (SPM "<0x0A>" is that byte, its word-start mark and
 * BPE's "Ġ" a space; a byte token may be part of a UTF-8 character). Control
 * and unknown tokens give "" unless special (then their text, "<s>"). Written
 * and sized as rotor_detokenize's text. An id out of range is an error naming
 * it. Any thread. */
ROTOR_API rotor_status *rotor_token_piece(const rotor_model *model, int32_t token, bool special,
                                          char *text, size_t capacity, size_t *n_bytes);

/* ---- KV configuration ------------------------------------------------- */

/* A sequence's KV cache: policy and options, set by name exactly as the CLI's
 * flags and the server's JSON fields, checked the same way. */
typedef struct rotor_kv_config rotor_kv_config;

/* The full cache (every token kept), K/V type and RoPE mode at their defaults. */
ROTOR_API rotor_status *rotor_kv_config_new(rotor_kv_config **out);
ROTOR_API void rotor_kv_config_free(rotor_kv_config *config);
/* option: a JSON field ("kv", "kv_size", "kv_keep", "kv_recent", "kv_window",
 * "rope_k", "kv_positions", "kv_type", "kv_type_k", "kv_type_v", "kv_rotate",
 * "kv_k_offset")
 * or a flag ("--kv-size", "--cache-type-k"); value as the CLI takes it
 * ("sink", "256", "deferred", "q8_0", "on"). Errors name both. The value is
 * checked here; how the options fit together and the model, by
 * rotor_kv_config_describe and rotor_seq_new. Any order: the policy applies
 * first (an option it does not use is an error then, not dropped), then the
 * others in a fixed order (kv_type before kv_type_k / kv_type_v, so the more
 * specific wins); setting an option again replaces its value. */
ROTOR_API rotor_status *rotor_kv_config_set(rotor_kv_config *config, const char *option,
                                            const char *value);
/* The resolved configuration for a model's context in words ("sink, 256 cells
 * (4 sinks + 252 recent), original positions, cached keys, f32 K/V"), or the
 * error a sequence would get. Writes a NUL-terminated string: *n_bytes (may
 * be NULL) receives the size it needs, NUL included (its length + 1), also
 * with ROTOR_ERR_BUFFER_TOO_SMALL, so a buffer of *n_bytes fits (unlike
 * rotor_detokenize's text, which is bytes and gets a NUL only when room
 * remains). */
ROTOR_API rotor_status *rotor_kv_config_describe(const rotor_kv_config *config,
                                                 const rotor_model *model, char *text,
                                                 size_t capacity, size_t *n_bytes);

/* ---- Contexts and sequences ------------------------------------------- */

/* Sequences that evaluate together (one ubatch per step), each with its own
 * KV configuration, on the model's K/V memory. */
typedef struct rotor_context rotor_context;

typedef struct rotor_context_params {
  int max_seqs;     /* sequences evaluated in one rotor_eval_batch step */
  int prefill_step; /* prompt tokens per forward pass (chunked prefill); 0 = 512,
                     * at most 1048576 */
} rotor_context_params;

ROTOR_API rotor_context_params rotor_context_default_params(void);
/* params may be NULL. Takes the model's lock. */
ROTOR_API rotor_status *rotor_context_new(rotor_model *model, const rotor_context_params *params,
                                          rotor_context **out);
/* Frees its sequences. Takes the model's lock. */
ROTOR_API void rotor_context_free(rotor_context *ctx);

/* A new, empty sequence with this KV configuration (NULL: full cache).
 * Its id (>= 0) goes to *seq. Errors: an option out of range for the
 * model's context (named). Takes the model's lock. */
ROTOR_API rotor_status *rotor_seq_new(rotor_context *ctx, const rotor_kv_config *kv,
                                      int32_t *seq);
ROTOR_API rotor_status *rotor_seq_free(rotor_context *ctx, int32_t seq);

/* Appends tokens to a sequence, in chunks of prefill_step. The first tokens a
 * sequence gets are its prompt (policies such as snapkv compress it when it
 * ends); later calls continue it. Afterwards rotor_logits gives the
 * distribution after the last token. all_logits, if not NULL, receives the
 * logits after every token: n_tokens * n_vocab floats. Errors: tokens that do
 * not fit the sequence's cache (ROTOR_ERR_CONTEXT_FULL, nothing appended),
 * an id out of range (nothing appended), K/V memory exhausted. Takes the
 * model's lock. */
ROTOR_API rotor_status *rotor_eval(rotor_context *ctx, int32_t seq, const int32_t *tokens,
                                   size_t n_tokens, float *all_logits);

typedef struct rotor_batch_entry {
  int32_t seq;
  const int32_t *tokens;
  size_t n_tokens;
} rotor_batch_entry;

/* Appends tokens to several sequences, stepped together: each step one
 * forward pass over every sequence's next chunk (batched decode when each
 * entry holds one token). Results equal running each alone. Each sequence at
 * most once. On an error the entries that could run still ran; the error
 * names the first sequence that failed. Takes the model's lock. */
ROTOR_API rotor_status *rotor_eval_batch(rotor_context *ctx, const rotor_batch_entry *entries,
                                         size_t n_entries);

/* The logits after the sequence's last token ([n_vocab] floats), valid until
 * the sequence's next eval, operation or free. Error: no token evaluated
 * since the sequence began or was changed. */
ROTOR_API rotor_status *rotor_logits(rotor_context *ctx, int32_t seq, const float **logits);

/* Tokens of the sequence's text so far (including evicted ones). */
ROTOR_API rotor_status *rotor_seq_n_tokens(rotor_context *ctx, int32_t seq, int64_t *n_tokens);
/* Tokens the cache holds now (bounded by an evicting policy's size). */
ROTOR_API rotor_status *rotor_seq_n_cached(rotor_context *ctx, int32_t seq, int64_t *n_cells);
/* Bytes of K/V the sequence holds in the model's block pool. */
ROTOR_API rotor_status *rotor_seq_kv_bytes(rotor_context *ctx, int32_t seq, int64_t *bytes);

/* Sequence operations (llama.cpp's seq_rm, seq_keep, seq_cp, seq_add), each
 * refused with a clear error where the sequence's policy cannot honour it;
 * on an error the sequence is unchanged. Token indices count the sequence's
 * text from 0. All take the model's lock. */
/* Drops tokens [n, n_tokens): the text continues at token n. */
ROTOR_API rotor_status *rotor_seq_keep_prefix(rotor_context *ctx, int32_t seq, int64_t n);
/* Drops tokens [from, to); later tokens keep their positions. Up to the end
 * (to = n_tokens) it is rotor_seq_keep_prefix(from). */
ROTOR_API rotor_status *rotor_seq_remove(rotor_context *ctx, int32_t seq, int64_t from,
                                         int64_t to);
/* Adds delta to the positions of tokens [from, to). With cached RoPE the
 * stored keys are rotated again (and rounded or requantized): the sequence
 * can no longer be saved (rotor_seq_save), even once shifted back, until
 * rotor_seq_clear. */
ROTOR_API rotor_status *rotor_seq_shift(rotor_context *ctx, int32_t seq, int64_t from,
                                        int64_t to, int32_t delta);
/* A new sequence with a copy of this one's cache (sharing its blocks where
 * the policy allows); its id goes to *copy. */
ROTOR_API rotor_status *rotor_seq_fork(rotor_context *ctx, int32_t seq, int32_t *copy);
/* Empties the sequence: its next tokens are a new prompt. */
ROTOR_API rotor_status *rotor_seq_clear(rotor_context *ctx, int32_t seq);

/* Saves the sequence's cache to a KV file (`rotor generate --prompt-cache`'s
 * format): policies that share prefixes (full, sink and window before they
 * evict). *bytes (may be NULL) receives the file's size. */
ROTOR_API rotor_status *rotor_seq_save(rotor_context *ctx, int32_t seq, const char *path,
                                       int64_t *bytes);
/* Loads a KV file into an empty sequence: its tokens count as evaluated (get
 * them with rotor_seq_tokens); the next eval continues the text. Refused,
 * naming both values, for a file of another model, K/V type, RoPE or
 * positions mode, or a damaged file. */
ROTOR_API rotor_status *rotor_seq_load(rotor_context *ctx, int32_t seq, const char *path,
                                       int64_t *n_tokens);
/* The token ids of the sequence's text (up to capacity; *n_tokens gets the
 * count, ROTOR_ERR_BUFFER_TOO_SMALL when it does not fit). */
ROTOR_API rotor_status *rotor_seq_tokens(rotor_context *ctx, int32_t seq, int32_t *tokens,
                                         size_t capacity, size_t *n_tokens);

/* ---- Sampling --------------------------------------------------------- */

typedef struct rotor_sampling_params {
  float temperature;    /* 0 = greedy */
  int top_k;            /* 0 = off */
  float top_p;          /* 1 = off */
  float min_p;          /* 0 = off */
  float repeat_penalty; /* 1 = off */
  int repeat_last_n;    /* 0 = off, -1 = every accepted token */
  uint64_t seed;        /* 0xFFFFFFFF = random */
  float presence_penalty;  /* 0 = off; once per token in the repetition window */
  float frequency_penalty; /* 0 = off; per occurrence in the window */
} rotor_sampling_params;

/* The CLI's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, random seed). */
ROTOR_API rotor_sampling_params rotor_sampling_default_params(void);
/* Greedy decoding (temperature 0). */
ROTOR_API rotor_sampling_params rotor_sampling_greedy_params(void);

/* The CLI's sampler chain (repetition, presence and frequency penalties, top-k, temperature, top-p,
 * min-p, seeded draw): the same tokens for the same seed and logits. */
typedef struct rotor_sampler rotor_sampler;
/* Errors name a parameter out of range. */
ROTOR_API rotor_status *rotor_sampler_new(const rotor_sampling_params *params, int32_t n_vocab,
                                          rotor_sampler **out);
ROTOR_API void rotor_sampler_free(rotor_sampler *sampler);
/* Draws a token from logits ([n_vocab] floats). Does not accept it. -1 for a
 * NULL sampler or logits, logits holding NaN or +inf (a model whose weights
 * hold them), or all -inf (-inf is a banned token: every token banned). */
ROTOR_API int32_t rotor_sampler_sample(rotor_sampler *sampler, const float *logits);
/* Records a token in the repetition history (an id outside [0, n_vocab) is
 * ignored). */
ROTOR_API void rotor_sampler_accept(rotor_sampler *sampler, int32_t token);
/* The seed in use (the drawn one when the params asked for a random seed). */
ROTOR_API uint64_t rotor_sampler_seed(const rotor_sampler *sampler);

/* ---- Generation ------------------------------------------------------- */

/* Receives generated text as it is decoded (whole UTF-8 characters); return
 * false to stop. */
typedef bool (*rotor_text_callback)(const char *text, size_t len, void *user);

typedef enum rotor_finish {
  ROTOR_FINISH_EOS = 0,       /* an end-of-generation token */
  ROTOR_FINISH_LENGTH = 1,    /* n_predict tokens */
  ROTOR_FINISH_STOP = 2,      /* a stop string */
  ROTOR_FINISH_CONTEXT = 3,   /* the sequence's cache is full */
  ROTOR_FINISH_CANCELLED = 4  /* the callback returned false */
} rotor_finish;

typedef struct rotor_generate_params {
  const char *prompt;                 /* UTF-8, NUL-terminated */
  int32_t n_predict;                  /* tokens to generate; -1 = until eos or a full cache */
  bool add_bos;                       /* true: as the CLI */
  bool parse_special;                 /* control-token texts in the prompt become tokens */
  bool ignore_eos;                    /* keep generating past end-of-generation tokens */
  rotor_sampling_params sampling;
  const rotor_kv_config *kv;          /* NULL: full cache */
  const char *const *stop;            /* stop strings (not part of the output) */
  size_t n_stop;
  int prefill_step;                   /* 0 = 512, at most 1048576 */
  /* Constrained output (docs/GRAMMAR.md): at most one of these, NULL = none.
   * A GBNF grammar (llama.cpp's format) or a JSON Schema (JSON text); an
   * invalid one is an error naming its line/column or schema path. */
  const char *grammar;
  const char *json_schema;
} rotor_generate_params;

/* add_bos true, n_predict 256, the default sampler, full cache. */
ROTOR_API rotor_generate_params rotor_generate_default_params(void);

typedef struct rotor_generate_result {
  int64_t n_prompt;       /* prompt tokens */
  int64_t n_cached;       /* of which taken from the prefix cache */
  int64_t n_generated;    /* tokens generated */
  rotor_finish finish;
  double prompt_tokens_per_s;
  double gen_tokens_per_s;
} rotor_generate_result;

/* Generates text after params->prompt, streaming it to on_text (may be NULL).
 * result may be NULL. Errors: bad parameters (named), a prompt longer than
 * the cache. Memory stays flat however long it runs (nothing is collected).
 * Takes the model's lock. */
ROTOR_API rotor_status *rotor_generate(rotor_model *model, const rotor_generate_params *params,
                                       rotor_text_callback on_text, void *user,
                                       rotor_generate_result *result);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ROTOR_ROTOR_H_ */
