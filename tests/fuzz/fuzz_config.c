/* libFuzzer target: an advisor configuration file (outside bytes from an
 * operator), through the INI parser and every key type's value parser, and
 * the same bytes as a command-line "section.key=value" override. Errors are
 * expected; crashes, overruns and unterminated error messages are not. */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "advisor/advisor.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int rc, const char *err, size_t errlen) {
  if (rc != 0 && (memchr(err, '\0', errlen) == NULL || err[0] == '\0'))
    abort(); /* an error must say why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_advisor_config_t cfg;
  char err[512], path[64];
  int fd, rc;

  kvp_advisor_config_defaults(&cfg);
  fd = memfd_create("kvp-fuzz-config", 0);
  if (fd < 0)
    return 0;
  if (write(fd, data, size) == (ssize_t)size) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rc = kvp_advisor_config_load(&cfg, path, err, sizeof err);
    check_err(rc, err, sizeof err);
    if (rc == 0)
      check_err(kvp_advisor_config_check(&cfg, err, sizeof err), err, sizeof err);
  }
  close(fd);

  char *line = malloc(size + 1);
  if (line == NULL)
    return 0;
  memcpy(line, data, size);
  line[size] = '\0';
  kvp_advisor_config_defaults(&cfg);
  rc = kvp_advisor_config_set(&cfg, line, err, sizeof err);
  check_err(rc, err, sizeof err);
  free(line);
  return 0;
}
