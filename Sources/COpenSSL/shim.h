// The OpenSSL the cluster layer's TLS uses (PortCluster alone links it): the headers, the
// macros Swift cannot call as functions, and the method of a socket BIO (whose reads and
// writes PortCluster gives, made through the System layer).
#ifndef PORTKIT_COPENSSL_SHIM_H
#define PORTKIT_COPENSSL_SHIM_H

#include <stdint.h>
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

/// The socket a PortKit BIO reads and writes (its data).
static inline int portkit_bio_fd(BIO *bio) {
    return (int)(intptr_t)BIO_get_data(bio);
}

/// BIO_clear_retry_flags (a macro).
static inline void portkit_bio_clear_retry(BIO *bio) {
    BIO_clear_retry_flags(bio);
}

/// BIO_set_retry_read (a macro): the read would block, try it again later.
static inline void portkit_bio_set_retry_read(BIO *bio) {
    BIO_set_retry_read(bio);
}

/// BIO_set_retry_write (a macro): the write would block, try it again later.
static inline void portkit_bio_set_retry_write(BIO *bio) {
    BIO_set_retry_write(bio);
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

/// The method of a socket BIO whose writes and reads are `write` and `read` (the caller's:
/// PortCluster makes them through the System layer); made once by its caller, never freed.
static inline BIO_METHOD *portkit_bio_method_make(int (*write)(BIO *, const char *, int), int (*read)(BIO *, char *, int)) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "portkit socket");
    if (method == NULL) return NULL;
    BIO_meth_set_write(method, write);
    BIO_meth_set_read(method, read);
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
