/* simple MODEL PROMPT N: greedy-generates N tokens after PROMPT and prints the
 * prompt and the generated text to stdout (errors to stderr, exit 1).
 * Load, tokenize, evaluate the prompt, then sample and evaluate one token at
 * a time: the C API's data path in one screen. */
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
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL PROMPT N\n", argv[0]);
    return 1;
  }
  const char *prompt = argv[2];
  const long n_predict = strtol(argv[3], NULL, 10);
  if (n_predict < 0 || n_predict > 1000000) {
    fprintf(stderr, "N must be in [0, 1000000], not %s\n", argv[3]);
    return 1;
  }

  rotor_model *model = NULL;
  rotor_status *s = rotor_model_load(argv[1], NULL, &model);
  if (s) return fail(s);

  /* Prompt tokens: ask for the count first, then fill. */
  size_t n_prompt = 0;
  s = rotor_tokenize(model, prompt, strlen(prompt), true, false, NULL, 0, &n_prompt);
  if (s && rotor_status_code(s) != ROTOR_ERR_BUFFER_TOO_SMALL) return fail(s);
  rotor_status_free(s);
  int32_t *tokens = malloc(sizeof(int32_t) * (n_prompt + (size_t)n_predict));
  if (!tokens) return 1;
  if ((s = rotor_tokenize(model, prompt, strlen(prompt), true, false, tokens, n_prompt,
                          &n_prompt)))
    return fail(s);

  rotor_context *ctx = NULL;
  int32_t seq = -1;
  if ((s = rotor_context_new(model, NULL, &ctx))) return fail(s);
  if ((s = rotor_seq_new(ctx, NULL, &seq))) return fail(s); /* NULL: the full cache */
  rotor_sampling_params greedy = rotor_sampling_greedy_params();
  rotor_sampler *sampler = NULL;
  if ((s = rotor_sampler_new(&greedy, rotor_model_n_vocab(model), &sampler))) return fail(s);

  size_t n = n_prompt;
  if ((s = rotor_eval(ctx, seq, tokens, n_prompt, NULL))) return fail(s);
  for (long i = 0; i < n_predict; ++i) {
    const float *logits = NULL;
    if ((s = rotor_logits(ctx, seq, &logits))) return fail(s);
    const int32_t t = rotor_sampler_sample(sampler, logits);
    if (rotor_model_token_is_eog(model, t)) break;
    rotor_sampler_accept(sampler, t);
    tokens[n++] = t;
    if (i + 1 < n_predict && (s = rotor_eval(ctx, seq, &t, 1, NULL))) return fail(s);
  }

  /* The whole text at once: pieces of a character may span tokens. */
  size_t n_bytes = 0;
  s = rotor_detokenize(model, tokens, n, false, NULL, 0, &n_bytes);
  if (s && rotor_status_code(s) != ROTOR_ERR_BUFFER_TOO_SMALL) return fail(s);
  rotor_status_free(s);
  char *text = malloc(n_bytes + 1);
  if (!text) return 1;
  if ((s = rotor_detokenize(model, tokens, n, false, text, n_bytes + 1, &n_bytes))) return fail(s);
  fwrite(text, 1, n_bytes, stdout);
  putchar('\n');

  free(text);
  free(tokens);
  rotor_sampler_free(sampler);
  rotor_context_free(ctx);
  rotor_model_free(model);
  return 0;
}
