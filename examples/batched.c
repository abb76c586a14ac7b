/* batched MODEL N: three prompts, each with its own KV policy (full, sink,
 * window), generated together: every step evaluates one token of every
 * sequence in one forward pass. Prints each sequence's policy and text. */
#include <rotor/rotor.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SEQ 3

static int fail(rotor_status *s) {
  fprintf(stderr, "%s\n", rotor_status_message(s));
  rotor_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL N\n", argv[0]);
    return 1;
  }
  const long n_predict = strtol(argv[2], NULL, 10);
  if (n_predict < 1 || n_predict > 100000) {
    fprintf(stderr, "N must be in [1, 100000], not %s\n", argv[2]);
    return 1;
  }
  const char *prompts[N_SEQ] = {"Once upon a time", "The little dog", "Lily wanted to"};
  /* option/value pairs per sequence, as the CLI's --kv flags. */
  const char *kv[N_SEQ][3][2] = {
      {{"kv", "full"}, {NULL, NULL}, {NULL, NULL}},
      {{"kv", "sink"}, {"kv_size", "64"}, {"kv_keep", "4"}},
      {{"kv", "window"}, {"kv_size", "64"}, {NULL, NULL}}};

  rotor_model_params mp = rotor_model_default_params();
  mp.max_seqs = N_SEQ;
  rotor_model *model = NULL;
  rotor_status *s = rotor_model_load(argv[1], &mp, &model);
  if (s) return fail(s);
  rotor_context_params cp = rotor_context_default_params();
  cp.max_seqs = N_SEQ;
  rotor_context *ctx = NULL;
  if ((s = rotor_context_new(model, &cp, &ctx))) return fail(s);

  int32_t seq[N_SEQ];
  int32_t *text[N_SEQ];
  size_t n_text[N_SEQ];
  int done[N_SEQ] = {0};
  rotor_sampler *sampler[N_SEQ];
  rotor_batch_entry batch[N_SEQ];
  const size_t cap = 64 + (size_t)n_predict;
  for (int i = 0; i < N_SEQ; ++i) {
    rotor_kv_config *config = NULL;
    if ((s = rotor_kv_config_new(&config))) return fail(s);
    for (int j = 0; j < 3 && kv[i][j][0]; ++j)
      if ((s = rotor_kv_config_set(config, kv[i][j][0], kv[i][j][1]))) return fail(s);
    s = rotor_seq_new(ctx, config, &seq[i]);
    rotor_kv_config_free(config);
    if (s) return fail(s);
    text[i] = malloc(sizeof(int32_t) * cap);
    if (!text[i]) return 1;
    if ((s = rotor_tokenize(model, prompts[i], strlen(prompts[i]), true, false, text[i], 64,
                            &n_text[i])))
      return fail(s);
    rotor_sampling_params sp = rotor_sampling_default_params();
    sp.seed = 42 + (uint64_t)i;
    if ((s = rotor_sampler_new(&sp, rotor_model_n_vocab(model), &sampler[i]))) return fail(s);
    batch[i] = (rotor_batch_entry){seq[i], text[i], n_text[i]};
  }
  /* The prompts, chunked and batched, then one token per sequence per step. */
  if ((s = rotor_eval_batch(ctx, batch, N_SEQ))) return fail(s);
  for (long step = 0; step < n_predict; ++step) {
    size_t n_batch = 0;
    for (int i = 0; i < N_SEQ; ++i) {
      if (done[i]) continue;
      const float *logits = NULL;
      if ((s = rotor_logits(ctx, seq[i], &logits))) return fail(s);
      const int32_t t = rotor_sampler_sample(sampler[i], logits);
      rotor_sampler_accept(sampler[i], t);
      if (rotor_model_token_is_eog(model, t)) {
        done[i] = 1;
        continue;
      }
      text[i][n_text[i]++] = t;
      batch[n_batch++] = (rotor_batch_entry){seq[i], &text[i][n_text[i] - 1], 1};
    }
    if (n_batch == 0) break;
    if (step + 1 < n_predict && (s = rotor_eval_batch(ctx, batch, n_batch))) return fail(s);
  }
  for (int i = 0; i < N_SEQ; ++i) {
    char out[65536];
    size_t n_bytes = 0;
    if ((s = rotor_detokenize(model, text[i], n_text[i], false, out, sizeof out, &n_bytes)))
      return fail(s);
    printf("[%s] %.*s\n", kv[i][0][1], (int)n_bytes, out);
    rotor_sampler_free(sampler[i]);
    free(text[i]);
  }
  rotor_context_free(ctx);
  rotor_model_free(model);
  return 0;
}
