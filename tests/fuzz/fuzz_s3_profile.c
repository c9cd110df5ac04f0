/* libFuzzer target: an AWS shared file (~/.aws/credentials or
 * ~/.aws/config, outside text an operator or a tool wrote) through the s3
 * plugin's INI reader (plugins/s3/s3_profile.c), and the same bytes as an
 * endpoint for the plain-http check and the endpoint's host and port check. The first byte picks
 * the file kind and the profile. Nothing is an error; crashes, overruns and values that are not
 * strings are. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "s3_profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *s, size_t cap) {
  if (memchr(s, '\0', cap) == NULL)
    abort(); /* every value is a string */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *profiles[] = {"default", "prod", "a b", "p]"};
  if (size == 0)
    return 0;
  int config = data[0] & 1;
  const char *profile = profiles[(data[0] >> 1) & 3];
  char *text = malloc(size);
  if (text == NULL)
    return 0;
  memcpy(text, data + 1, size - 1);
  FILE *f = size > 1 ? fmemopen(text, size - 1, "r") : NULL;
  s3_prof_t p;
  memset(&p, 0, sizeof p);
  if (f != NULL) {
    kvp__s3_ini_read(f, profile, config, &p);
    fclose(f);
  }
  check(p.access, sizeof p.access);
  check(p.secret, sizeof p.secret);
  check(p.token, sizeof p.token);
  check(p.region, sizeof p.region);
  check(p.endpoint, sizeof p.endpoint);
  check(p.ca_bundle, sizeof p.ca_bundle);
  if (!p.found && (p.access[0] || p.secret[0] || p.region[0]))
    abort(); /* values only from the profile's own section */
  /* The same bytes as an endpoint. */
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  int r = kvp__s3_plain_http_remote(text);
  if (r != 0 && r != 1)
    abort();
  char err[160];
  r = kvp__s3_endpoint_check(text, err, sizeof err);
  if (r != 0 && (r != KVP_ECONFIG || memchr(err, '\0', sizeof err) == NULL))
    abort();
  free(text);
  return 0;
}
