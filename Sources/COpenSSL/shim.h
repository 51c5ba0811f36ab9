// The OpenSSL the cluster layer's TLS uses (PortCluster alone links it): the headers, the
// macros Swift cannot call as functions, and a socket BIO that never raises SIGPIPE.
#ifndef PORTKIT_COPENSSL_SHIM_H
#define PORTKIT_COPENSSL_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

/// SSL_CTX_set_mode (a macro).
static inline long portkit_ssl_ctx_set_mode(SSL_CTX *context, long mode) {
    return SSL_CTX_set_mode(context, mode);
}

/// SSL_CTX_set_min_proto_version (a macro); 1 on success.
static inline int portkit_ssl_ctx_set_min_proto_version(SSL_CTX *context, int version) {
    return (int)SSL_CTX_set_min_proto_version(context, version);
}

/// SSL_set_tlsext_host_name (a macro): the server name a client asks for; 1 on success.
static inline int portkit_ssl_set_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

/// SSL_CTX_get0_chain_certs (a macro): the extra certificates of the context's own chain.
static inline STACK_OF(X509) *portkit_ssl_ctx_chain(SSL_CTX *context) {
    STACK_OF(X509) *chain = NULL;
    SSL_CTX_get0_chain_certs(context, &chain);
    return chain;
}

/// The options every PortKit TLS context sets (SSL_OP_* are macros Swift cannot import):
/// no session tickets (nothing resumes; a server would otherwise write tickets after the
/// handshake), no renegotiation, and a peer's close without close_notify read as the end
/// of the stream (the framing above detects a truncated message).
static inline uint64_t portkit_ssl_options(void) {
    return SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF;
}

/// A socket BIO's write: send(2) with MSG_NOSIGNAL (a peer gone is EPIPE, never SIGPIPE)
/// and MSG_DONTWAIT; would-block marks the BIO to retry.
static inline int portkit_bio_write(BIO *bio, const char *bytes, int length) {
    BIO_clear_retry_flags(bio);
    int fd = (int)(intptr_t)BIO_get_data(bio);
    ssize_t sent = send(fd, bytes, (size_t)length, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(bio);
        return -1;
    }
    return (int)sent;
}

/// A socket BIO's read: recv(2) with MSG_DONTWAIT; 0 at the peer's end of the stream.
static inline int portkit_bio_read(BIO *bio, char *bytes, int length) {
    BIO_clear_retry_flags(bio);
    int fd = (int)(intptr_t)BIO_get_data(bio);
    ssize_t got = recv(fd, bytes, (size_t)length, MSG_DONTWAIT);
    if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(bio);
        return -1;
    }
    return (int)got;
}

/// A socket BIO's controls: flushing succeeds (nothing is buffered), the rest is unsupported.
static inline long portkit_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)bio;
    (void)number;
    (void)pointer;
    return command == BIO_CTRL_FLUSH ? 1 : 0;
}

static inline int portkit_bio_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

/// The method of the socket BIO above; made once by its caller, never freed.
static inline BIO_METHOD *portkit_bio_method_make(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "portkit socket");
    if (method == NULL) return NULL;
    BIO_meth_set_write(method, portkit_bio_write);
    BIO_meth_set_read(method, portkit_bio_read);
    BIO_meth_set_ctrl(method, portkit_bio_ctrl);
    BIO_meth_set_create(method, portkit_bio_create);
    return method;
}

/// A socket BIO on `fd` (which it never closes).
static inline BIO *portkit_bio_new(BIO_METHOD *method, int fd) {
    BIO *bio = BIO_new(method);
    if (bio != NULL) BIO_set_data(bio, (void *)(intptr_t)fd);
    return bio;
}

#endif
