#!/usr/bin/python3
"""The botocore baseline of kvp-bench volume --s3: the same puts or gets
the plugin makes (N objects of SIZE bytes, one at a time, one connection
pool), timed inside the process so that Python's start is not counted.

    s3_bench_boto.py put|get ENDPOINT BUCKET ACCESS SECRET REGION PREFIX SIZE N FIRST

Prints the seconds the N requests took. Payloads are signed
(x-amz-content-sha256 over plain http, as the plugin does); botocore's
extra checksums are off where it has the switch, as the plugin sends none.
"""
import os
import sys
import time

import botocore.session
from botocore.config import Config

mode, endpoint, bucket, ak, sk, region, prefix = sys.argv[1:8]
size, n, first = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
opts = {"s3": {"addressing_style": "path"}, "retries": {"max_attempts": 1}}
try:
    cfg = Config(request_checksum_calculation="when_required",
                 response_checksum_validation="when_required", **opts)
except TypeError:
    cfg = Config(**opts)
client = botocore.session.get_session().create_client(
    "s3", endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk,
    region_name=region, config=cfg)
body = os.urandom(size)
t0 = time.monotonic()
for i in range(first, first + n):
    key = "%sboto/%016x" % (prefix, i)
    if mode == "put":
        client.put_object(Bucket=bucket, Key=key, Body=body)
    else:
        got = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert len(got) == size
print("%.6f" % (time.monotonic() - t0))
