/* The parts of the s3 plugin's credential chain that read outside text:
 * the AWS shared files (~/.aws/credentials, ~/.aws/config, INI) and the
 * endpoint's host. No libcurl here, so they build alone (the fuzz target
 * fuzz_s3_profile and the unit test test_volume_s3_profile compile this
 * file beside them). */
#ifndef KVP_PLUGIN_S3_PROFILE_H
#define KVP_PLUGIN_S3_PROFILE_H

#include <stdio.h>

/* The values a profile may give; each a NUL-terminated string, "" when
 * absent. */
typedef struct s3_prof_s {
  char access[256], secret[256], token[2048];
  char region[64], endpoint[512], ca_bundle[1024];
  int found; /* the profile's section was seen */
} s3_prof_t;

/* Reads the section of profile from an AWS shared file: in the credentials
 * file [name], in the config file (config != 0) [profile name], or
 * [default]. Keys: aws_access_key_id, aws_secret_access_key,
 * aws_session_token, region, endpoint_url, ca_bundle. A value already set
 * in p (from an earlier file) or earlier in the section wins. Comments (#
 * ;), blank lines, indented lines (the keys of a nested "s3 =" block) and
 * lines longer than 8 KiB are passed over. Never fails: what it cannot read
 * it ignores. */
void kvp__s3_ini_read(FILE *f, const char *profile, int config, s3_prof_t *p);

/* 1 when endpoint is plain http:// to a host that is not loopback
 * (localhost, *.localhost, 127.0.0.0/8, [::1]): the blocks would travel
 * unencrypted. 0 for https:// and for loopback. */
int kvp__s3_plain_http_remote(const char *endpoint);

/* 0 when endpoint (after its "scheme://") has a host and either no port or
 * a decimal one in 1..65535; else KVP_ECONFIG with err naming it. libcurl
 * refuses such a URL only at the first request ("URL using bad/illegal
 * format"), which would read as the store being unreachable. */
int kvp__s3_endpoint_check(const char *endpoint, char *err, size_t errlen);

#endif
