/* The header compiles as strict C99 (-std=c99 -pedantic -Werror) and the
 * shared library links from C: load the bundled model, generate greedily,
 * and check the text starts as the reference does. Exit 0 on success. */
#include <rotor/rotor.h>
#include <stdio.h>
#include <string.h>

struct sink {
  char text[4096];
  size_t n;
};

static bool on_text(const char *t, size_t n, void *user) {
  struct sink *s = (struct sink *)user;
  if (s->n + n < sizeof s->text) {
    memcpy(s->text + s->n, t, n);
    s->n += n;
  }
  return true;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  rotor_model *model = NULL;
  rotor_status *s = rotor_model_load(argv[1], NULL, &model);
  if (s) {
    fprintf(stderr, "%s\n", rotor_status_message(s));
    rotor_status_free(s);
    return 1;
  }
  rotor_generate_params g = rotor_generate_default_params();
  g.prompt = "Once upon a time";
  g.n_predict = 12;
  g.sampling = rotor_sampling_greedy_params();
  struct sink out = {{0}, 0};
  rotor_generate_result r;
  s = rotor_generate(model, &g, on_text, &out, &r);
  if (s) {
    fprintf(stderr, "%s\n", rotor_status_message(s));
    rotor_status_free(s);
    return 1;
  }
  rotor_model_free(model);
  out.text[out.n] = '\0';
  printf("%s|%lld\n", out.text, (long long)r.n_generated);
  return strncmp(out.text, ", there was a little girl named Lily", 36) == 0 && r.n_generated == 12
             ? 0
             : 1;
}
