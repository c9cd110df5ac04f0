#!/usr/bin/python3
"""An S3 endpoint that checks every request's AWS SigV4 signature with
Debian's python3-botocore, independently of the client that signed it.

    sigv4_check.py PORT BUCKET ACCESS_KEY SECRET_KEY

For each request it rebuilds the request from what arrived (method, path,
query, the headers named in SignedHeaders, the body), has botocore's
S3SigV4Auth compute the signature at the request's own X-Amz-Date, and
compares it with the one in the Authorization header. It also checks that
x-amz-content-sha256 is the SHA-256 of the body. A mismatch is answered 403
SignatureDoesNotMatch (and logged); otherwise a tiny in-memory S3: PUT
stores, GET/HEAD return, DELETE removes, a bucket GET is an empty-enough
ListObjectsV2. s3rver (the main test server) does not check signatures;
this does. Loopback only.
"""
import hashlib
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

PORT, BUCKET, ACCESS, SECRET = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
STORE = {}
CHECKED = {"ok": 0, "bad": 0}


def parse_auth(value):
    # AWS4-HMAC-SHA256 Credential=AK/date/region/s3/aws4_request, SignedHeaders=a;b, Signature=hex
    algo, _, rest = value.partition(" ")
    fields = {}
    for part in rest.split(","):
        k, _, v = part.strip().partition("=")
        fields[k] = v
    cred = fields.get("Credential", "").split("/")
    return algo, cred, fields.get("SignedHeaders", "").split(";"), fields.get("Signature", "")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("sigv4_check: " + (fmt % args) + "\n")

    def reply(self, code, body=b"", ctype="application/xml", extra=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, name, msg):
        body = ("<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>%s</Message></Error>"
                % (name, msg)).encode()
        self.reply(code, body)

    def verify(self, body):
        auth = self.headers.get("Authorization", "")
        algo, cred, signed, signature = parse_auth(auth)
        if algo != "AWS4-HMAC-SHA256" or len(cred) != 5 or cred[0] != ACCESS:
            return "bad Authorization header: %r" % auth
        payload = self.headers.get("x-amz-content-sha256", "")
        if payload != hashlib.sha256(body).hexdigest():
            return "x-amz-content-sha256 %r is not the body's SHA-256" % payload
        if "x-amz-content-sha256" not in signed:
            return "x-amz-content-sha256 is not signed"
        url = "http://%s%s" % (self.headers["Host"], self.path)
        headers = {h: self.headers[h] for h in signed if self.headers.get(h) is not None}
        req = AWSRequest(method=self.command, url=url, headers=headers, data=body)
        amz_date = self.headers.get("x-amz-date", "")
        req.context["timestamp"] = amz_date
        signer = S3SigV4Auth(Credentials(ACCESS, SECRET), "s3", cred[2])
        # botocore signs the headers present; these are exactly the client's.
        canonical = signer.canonical_request(req)
        string_to_sign = signer.string_to_sign(req, canonical)
        expected = signer.signature(string_to_sign, req)
        if expected != signature:
            return "signature %s, botocore computes %s\ncanonical request:\n%s" % (
                signature, expected, canonical)
        return None

    def handle_any(self):
        length = int(self.headers.get("Content-Length", "0") or 0)
        body = self.rfile.read(length) if length else b""
        why = self.verify(body)
        if why is not None:
            CHECKED["bad"] += 1
            self.log_message("403: %s", why)
            return self.error(403, "SignatureDoesNotMatch", "checked by botocore")
        CHECKED["ok"] += 1
        path = urllib.parse.urlsplit(self.path)
        parts = path.path.lstrip("/").split("/", 1)
        if parts[0] != BUCKET:
            return self.error(404, "NoSuchBucket", parts[0])
        key = urllib.parse.unquote(parts[1]) if len(parts) > 1 and parts[1] else None
        if key is None:
            if self.command != "GET":
                return self.error(405, "MethodNotAllowed", self.command)
            items = "".join("<Contents><Key>%s</Key><Size>%d</Size></Contents>" % (k, len(v))
                            for k, v in sorted(STORE.items()))
            xml = ("<?xml version=\"1.0\"?><ListBucketResult><Name>%s</Name>%s"
                   "<IsTruncated>false</IsTruncated></ListBucketResult>" % (BUCKET, items))
            return self.reply(200, xml.encode())
        if self.command == "PUT":
            STORE[key] = body
            return self.reply(200, b"", extra={"ETag": '"%s"' % hashlib.md5(body).hexdigest()})
        if key not in STORE:
            return self.error(404, "NoSuchKey", key)
        if self.command in ("GET", "HEAD"):
            return self.reply(200, STORE[key], "application/octet-stream")
        if self.command == "DELETE":
            del STORE[key]
            return self.reply(204)
        return self.error(405, "MethodNotAllowed", self.command)

    do_GET = do_PUT = do_HEAD = do_DELETE = handle_any


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
