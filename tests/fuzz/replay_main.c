/* replay_main.c — runs LLVMFuzzerTestOneInput on every file named on the
 * command line or held (not recursively) in a folder named there, the way
 * libFuzzer replays a corpus, so the gcc build checks the stored corpora
 * and crashers as ordinary tests.  Prints how many inputs ran; exits 1 when
 * an argument cannot be read or no input ran. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    return -1;
  }
  size_t got;
  while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *b2 = realloc(buf, cap * 2);
      if (!b2) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = b2, cap *= 2;
    }
  }
  fclose(f);
  /* Exactly n bytes, in their own allocation, so an over-read is visible to
   * the sanitizers. */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  int ran = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat s;
    if (stat(argv[i], &s) != 0) {
      perror(argv[i]);
      failed = 1;
      continue;
    }
    if (!S_ISDIR(s.st_mode)) {
      if (run_file(argv[i]) == 0) ran++;
      else failed = 1;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) {
      perror(argv[i]);
      failed = 1;
      continue;
    }
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      if (nn == cap) {
        cap = cap ? cap * 2 : 32;
        char **n2 = realloc(names, cap * sizeof *names);
        if (!n2) abort();
        names = n2;
      }
      size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
      names[nn] = malloc(len);
      if (!names[nn]) abort();
      snprintf(names[nn], len, "%s/%s", argv[i], e->d_name);
      nn++;
    }
    closedir(d);
    if (nn) qsort(names, nn, sizeof *names, cmp_str);
    for (size_t k = 0; k < nn; k++) {
      struct stat fs;
      if (stat(names[k], &fs) == 0 && S_ISREG(fs.st_mode)) {
        printf("%s\n", names[k]);
        fflush(stdout);
        if (run_file(names[k]) == 0) ran++;
        else failed = 1;
      }
      free(names[k]);
    }
    free(names);
  }
  printf("ran %d input(s)\n", ran);
  return failed || ran == 0 ? 1 : 0;
}
