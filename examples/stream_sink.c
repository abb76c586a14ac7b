/* stream_sink MODEL [N]: generates without end (N tokens if given) with the
 * sink policy: the first 4 tokens and the last 252 stay in a 256-cell cache,
 * so memory is fixed however long it runs. Text goes to stdout as it is
 * generated; every 1024 tokens a line on stderr gives the K/V bytes held. */
#include <math.h>
#include <rotor/rotor.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(rotor_status *s) {
  fprintf(stderr, "%s\n", rotor_status_message(s));
  rotor_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s MODEL [N]\n", argv[0]);
    return 1;
  }
  const long long n_predict = argc == 3 ? strtoll(argv[2], NULL, 10) : -1;
  rotor_model *model = NULL;
  rotor_status *s = rotor_model_load(argv[1], NULL, &model);
  if (s) return fail(s);

  rotor_kv_config *kv = NULL;
  if ((s = rotor_kv_config_new(&kv))) return fail(s);
  if ((s = rotor_kv_config_set(kv, "kv", "sink")) || (s = rotor_kv_config_set(kv, "kv_size", "256")) ||
      (s = rotor_kv_config_set(kv, "kv_keep", "4")) ||
      /* Positions stay within the trained context: text stays sensible. */
      (s = rotor_kv_config_set(kv, "kv_positions", "compact")))
    return fail(s);
  rotor_context *ctx = NULL;
  int32_t seq = -1;
  if ((s = rotor_context_new(model, NULL, &ctx)) || (s = rotor_seq_new(ctx, kv, &seq)))
    return fail(s);
  rotor_kv_config_free(kv);

  const int32_t n_vocab = rotor_model_n_vocab(model);
  float *logits = malloc(sizeof(float) * (size_t)n_vocab);
  rotor_sampling_params sp = rotor_sampling_default_params();
  sp.seed = 7;
  rotor_sampler *sampler = NULL;
  if (!logits || (s = rotor_sampler_new(&sp, n_vocab, &sampler))) return s ? fail(s) : 1;

  int32_t prompt[64];
  size_t n_prompt = 0;
  const char *text = "Once upon a time";
  if ((s = rotor_tokenize(model, text, strlen(text), true, false, prompt, 64, &n_prompt)) ||
      (s = rotor_eval(ctx, seq, prompt, n_prompt, NULL)))
    return fail(s);
  printf("%s", text);
  int32_t prev = prompt[n_prompt - 1];
  for (long long i = 0; n_predict < 0 || i < n_predict; ++i) {
    const float *l = NULL;
    if ((s = rotor_logits(ctx, seq, &l))) return fail(s);
    memcpy(logits, l, sizeof(float) * (size_t)n_vocab);
    /* Never end: end-of-generation tokens are not drawn. */
    for (int32_t t = 0; t < n_vocab; ++t)
      if (rotor_model_token_is_eog(model, t)) logits[t] = -INFINITY;
    const int32_t t = rotor_sampler_sample(sampler, logits);
    rotor_sampler_accept(sampler, t);
    /* The piece of t: the text of (prev, t) minus that of prev. */
    char a[256], b[256];
    size_t na = 0, nb = 0;
    const int32_t pair[2] = {prev, t};
    if ((s = rotor_detokenize(model, pair, 1, false, a, sizeof a, &na)) ||
        (s = rotor_detokenize(model, pair, 2, false, b, sizeof b, &nb)))
      return fail(s);
    fwrite(b + na, 1, nb - na, stdout);
    fflush(stdout);
    prev = t;
    if ((s = rotor_eval(ctx, seq, &t, 1, NULL))) return fail(s);
    if ((i + 1) % 1024 == 0) {
      int64_t bytes = 0, n = 0;
      rotor_seq_kv_bytes(ctx, seq, &bytes);
      rotor_seq_n_tokens(ctx, seq, &n);
      fprintf(stderr, "\n[stream_sink] tokens %lld, kv bytes %lld\n", (long long)n,
              (long long)bytes);
    }
  }
  putchar('\n');
  free(logits);
  rotor_sampler_free(sampler);
  rotor_context_free(ctx);
  rotor_model_free(model);
  return 0;
}
