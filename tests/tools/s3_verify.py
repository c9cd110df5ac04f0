#!/usr/bin/python3
"""A server-faithful S3 endpoint for tests that verifies every request's AWS
SigV4 signature the way S3 does, with Debian's python3-botocore.

    s3_verify.py --port P --dir DATA --bucket B [--region R]
                 --cred ACCESS:SECRET[:TOKEN] [--cred ...] [--page N]

What S3 does and this does too:
- The canonical request is built from the request as received: the path is
  decoded and re-encoded per SigV4 (every byte but A-Z a-z 0-9 - . _ ~ and
  '/' as %XX, uppercase hex), the query parameters are decoded, re-encoded
  the same way and sorted; botocore's S3SigV4Auth computes the signature
  from that and the signed headers; a difference is 403
  SignatureDoesNotMatch (the body carries the canonical request).
- An unknown access key id is 403 InvalidAccessKeyId; a credential scope
  naming another region is 400 AuthorizationHeaderMalformed; a key id
  issued with a session token needs x-amz-security-token (403 InvalidToken
  when missing or wrong); x-amz-content-sha256 must be the body's SHA-256.
- Path-style (/bucket/key) and virtual-hosted-style (Host: bucket.host)
  addressing; another bucket is 404 NoSuchBucket.
- ListObjectsV2 (list-type=2) with prefix, max-keys (at most --page, 1000 as
  S3), start-after, continuation-token, IsTruncated, NextContinuationToken,
  and keys XML-escaped.
Objects are files in DATA (named by the key's hex), so a restart keeps them.

Faults on demand, for timeout and retry tests: an unsigned
GET /__kvp_ctl?stall=S&count=N makes the next N object GETs send half the
body and stall S seconds; ?fail=N&status=503&code=SlowDown&retry_after=S
answers the next N requests with that error (and Retry-After).
Loopback only.
"""
import argparse
import base64
import hashlib
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--dir", required=True)
ap.add_argument("--bucket", required=True)
ap.add_argument("--region", default="us-east-1")
ap.add_argument("--cred", action="append", default=[])
ap.add_argument("--page", type=int, default=1000)
ARGS = ap.parse_args()
CREDS = {}
for c in ARGS.cred:
    parts = c.split(":", 2)
    CREDS[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else None)
LOCK = threading.Lock()
FAULT = {"stall": 0.0, "stall_count": 0, "fail": 0, "status": 503, "code": "SlowDown",
         "retry_after": None}
XML_ENT = {'"': "&quot;", "'": "&apos;", "\r": "&#13;"}


def s3_quote(b, safe):
    return urllib.parse.quote(b, safe=safe)


def canonical_path(raw):
    return s3_quote(urllib.parse.unquote_to_bytes(raw), "/~")


def canonical_query(raw):
    pairs = []
    for part in raw.split("&") if raw else []:
        k, _, v = part.partition("=")
        k = urllib.parse.unquote_to_bytes(k)
        v = urllib.parse.unquote_to_bytes(v)
        pairs.append((s3_quote(k, "-_.~"), s3_quote(v, "-_.~")))
    return "&".join("%s=%s" % kv for kv in sorted(pairs))


def parse_auth(value):
    algo, _, rest = value.partition(" ")
    fields = {}
    for part in rest.split(","):
        k, _, v = part.strip().partition("=")
        fields[k] = v
    return algo, fields.get("Credential", "").split("/"), \
        fields.get("SignedHeaders", "").split(";"), fields.get("Signature", "")


def path_of(key):
    return os.path.join(ARGS.dir, key.encode("utf-8", "surrogateescape").hex())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("s3_verify: " + (fmt % args) + "\n")

    def reply(self, code, body=b"", ctype="application/xml", extra=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, name, msg, extra=None, more=""):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                "<Message>%s</Message>%s</Error>" % (name, escape(msg), more)).encode()
        self.log_message("%d %s: %s", code, name, msg)
        self.reply(code, body, extra=extra)

    def verify(self, body, path, query):
        auth = self.headers.get("Authorization", "")
        algo, cred, signed, signature = parse_auth(auth)
        if algo != "AWS4-HMAC-SHA256" or len(cred) != 5:
            return 403, "AccessDenied", "bad Authorization header: %r" % auth
        if cred[0] not in CREDS:
            return 403, "InvalidAccessKeyId", "no such access key id: %s" % cred[0]
        if cred[2] != ARGS.region or cred[3] != "s3" or cred[4] != "aws4_request":
            return 400, "AuthorizationHeaderMalformed", \
                "the region '%s' is wrong; expecting '%s'" % (cred[2], ARGS.region)
        secret, token = CREDS[cred[0]]
        if token is not None and self.headers.get("x-amz-security-token") != token:
            return 403, "InvalidToken", "the security token is missing or wrong"
        if token is None and self.headers.get("x-amz-security-token") is not None:
            return 403, "InvalidToken", "a security token for a key id without one"
        payload = self.headers.get("x-amz-content-sha256", "")
        if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
            return 400, "XAmzContentSHA256Mismatch", "x-amz-content-sha256 is not the body's"
        for h in ("host", "x-amz-date", "x-amz-content-sha256"):
            if h not in signed:
                return 403, "AccessDenied", "%s is not signed" % h
        if "x-amz-security-token" in self.headers and "x-amz-security-token" not in signed:
            return 403, "AccessDenied", "x-amz-security-token is not signed"
        url = "http://%s%s" % (self.headers["Host"], canonical_path(path))
        cq = canonical_query(query)
        if cq:
            url += "?" + cq
        headers = {h: self.headers[h] for h in signed if self.headers.get(h) is not None}
        req = AWSRequest(method=self.command, url=url, headers=headers, data=body)
        req.context["timestamp"] = self.headers.get("x-amz-date", "")
        signer = S3SigV4Auth(Credentials(cred[0], secret, token), "s3", cred[2])
        canonical = signer.canonical_request(req)
        expected = signer.signature(signer.string_to_sign(req, canonical), req)
        if expected != signature:
            return 403, "SignatureDoesNotMatch", \
                "signature %s, S3 computes %s; canonical request:\n%s" % (signature, expected,
                                                                          canonical)
        return None

    def control(self, query):
        q = dict(urllib.parse.parse_qsl(query))
        with LOCK:
            if "stall" in q:
                FAULT["stall"] = float(q["stall"])
                FAULT["stall_count"] = int(q.get("count", "1"))
            if "fail" in q:
                FAULT["fail"] = int(q["fail"])
                FAULT["status"] = int(q.get("status", "503"))
                FAULT["code"] = q.get("code", "SlowDown")
                FAULT["retry_after"] = q.get("retry_after")
        self.reply(200, b"ok\n", "text/plain")

    def handle_any(self):
        split = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length", "0") or 0)
        body = self.rfile.read(length) if length else b""
        if split.path == "/__kvp_ctl":
            return self.control(split.query)
        why = self.verify(body, split.path, split.query)
        if why is not None:
            return self.error(why[0], why[1], why[2])
        with LOCK:
            fail = FAULT["fail"] > 0
            if fail:
                FAULT["fail"] -= 1
                status, code, ra = FAULT["status"], FAULT["code"], FAULT["retry_after"]
        if fail:
            return self.error(status, code, "injected", {"Retry-After": ra} if ra else None)
        host = self.headers.get("Host", "").rsplit(":", 1)[0]
        path = urllib.parse.unquote_to_bytes(split.path).decode("utf-8", "surrogateescape")
        if host.startswith(ARGS.bucket + ".") or "." in host and not host[0].isdigit():
            bucket, key = host.split(".", 1)[0], path[1:]
        else:
            bucket, _, key = path[1:].partition("/")
        if bucket != ARGS.bucket:
            return self.error(404, "NoSuchBucket", "no such bucket: %s" % bucket)
        if key == "":
            if self.command != "GET":
                return self.error(405, "MethodNotAllowed", self.command)
            return self.list(split.query)
        f = path_of(key)
        if self.command == "PUT":
            tmp = f + ".tmp%d" % threading.get_ident()
            with open(tmp, "wb") as out:
                out.write(body)
            os.replace(tmp, f)
            return self.reply(200, b"", extra={"ETag": '"%s"' % hashlib.md5(body).hexdigest()})
        try:
            with open(f, "rb") as inp:
                data = inp.read()
        except FileNotFoundError:
            if self.command == "DELETE":
                return self.reply(204)
            return self.error(404, "NoSuchKey", "no such key: %s" % key)
        if self.command == "HEAD":
            return self.reply(200, data, "application/octet-stream")
        if self.command == "DELETE":
            os.unlink(f)
            return self.reply(204)
        if self.command == "GET":
            with LOCK:
                stall = FAULT["stall"] if FAULT["stall_count"] > 0 else 0
                if stall:
                    FAULT["stall_count"] -= 1
            if not stall:
                return self.reply(200, data, "application/octet-stream")
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                time.sleep(stall)
                self.wfile.write(data[len(data) // 2:])
            except OSError:
                self.close_connection = True
            return None
        return self.error(405, "MethodNotAllowed", self.command)

    def list(self, query):
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if q.get("list-type") != "2":
            return self.error(400, "InvalidArgument", "only ListObjectsV2 here")
        prefix = q.get("prefix", "")
        try:
            maxkeys = min(int(q.get("max-keys", "1000")), ARGS.page)
        except ValueError:
            return self.error(400, "InvalidArgument", "max-keys")
        after = q.get("start-after", "")
        if "continuation-token" in q:
            try:
                after = base64.urlsafe_b64decode(q["continuation-token"]).decode(
                    "utf-8", "surrogateescape")
            except ValueError:
                return self.error(400, "InvalidArgument", "The continuation token is not valid")
        keys = sorted(bytes.fromhex(n).decode("utf-8", "surrogateescape")
                      for n in os.listdir(ARGS.dir) if ".tmp" not in n)
        keys = [k for k in keys if k.startswith(prefix) and k > after]
        page, truncated = keys[:maxkeys], len(keys) > maxkeys
        items = []
        for k in page:
            try:
                size = os.path.getsize(path_of(k))
            except OSError:
                continue
            items.append("<Contents><Key>%s</Key><LastModified>2026-01-01T00:00:00.000Z"
                         "</LastModified><ETag>&quot;0&quot;</ETag><Size>%d</Size>"
                         "<StorageClass>STANDARD</StorageClass></Contents>"
                         % (escape(k, XML_ENT), size))
        nxt = ""
        if truncated:
            tok = base64.urlsafe_b64encode(page[-1].encode("utf-8", "surrogateescape")).decode()
            nxt = "<NextContinuationToken>%s</NextContinuationToken>" % tok
        ct = q.get("continuation-token")
        xml = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
               "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
               "<Name>%s</Name><Prefix>%s</Prefix>%s<KeyCount>%d</KeyCount>"
               "<MaxKeys>%d</MaxKeys><IsTruncated>%s</IsTruncated>%s%s</ListBucketResult>"
               % (ARGS.bucket, escape(prefix, XML_ENT),
                  "<ContinuationToken>%s</ContinuationToken>" % ct if ct else "", len(items),
                  maxkeys, "true" if truncated else "false", "".join(items), nxt))
        return self.reply(200, xml.encode("utf-8", "surrogateescape"))

    do_GET = do_PUT = do_HEAD = do_DELETE = handle_any


if __name__ == "__main__":
    os.makedirs(ARGS.dir, exist_ok=True)
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler).serve_forever()
