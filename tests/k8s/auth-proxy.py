"""A Prometheus behind TLS and credentials, for the autoscaler tests: an https proxy (what
kube-rbac-proxy or an ingress puts in front of Prometheus) that answers 401 unless the request
carries `Authorization: Bearer <token>` or `Basic <user:password>`, and forwards the rest to
the plain-http Prometheus.

Usage: auth-proxy.py PORT UPSTREAM CERT KEY TOKEN USER PASSWORD
"""
import base64
import http.server
import ssl
import sys
import urllib.error
import urllib.request

port, upstream, cert, key, token, user, password = sys.argv[1:8]
ACCEPTED = {
    "Bearer " + token,
    "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),
}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization", "") not in ACCEPTED:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="prometheus"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        try:
            with urllib.request.urlopen(upstream + self.path, timeout=5) as r:
                code, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            code, body = e.code, e.read()
        except OSError:
            code, body = 502, b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
