/* Runs a libFuzzer target over files or directories of inputs without
 * libFuzzer, so every build replays the seed corpus as a regression test:
 *   fuzz_<name>_replay <file-or-dir>... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf;
  long n;

  if (f == NULL) {
    fprintf(stderr, "%s: cannot open\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc(n > 0 ? (size_t)n : 1);
  if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(buf);
    return 1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, (size_t)n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int runs = 0, bad = 0;

  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad |= run_file(argv[i]);
      runs++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      char p[4096];
      if (e->d_name[0] == '.')
        continue;
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      bad |= run_file(p);
      runs++;
    }
    if (d)
      closedir(d);
  }
  printf("replayed %d inputs\n", runs);
  return bad || runs == 0;
}
