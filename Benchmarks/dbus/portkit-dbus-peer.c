// portkit-dbus-peer: the D-Bus side of portkit-bench's names cases, with libdbus, the
// reference client library. portkit-bench starts a private bus, then this program:
//
//     portkit-dbus-peer BUS_ADDRESS
//
// It owns TARGET_NAME on a connection served by a thread of its own (as PortKit's
// names fixture owns its name on a loop thread of the measuring process), says "ready",
// then answers commands on its standard input, one a line, with "ok MEDIAN_US" or
// "fail REASON" on its standard output:
//
//     lookup COUNT      GetNameOwner(TARGET_NAME) on a kept connection to the bus
//     call COUNT SIZE   a method call with SIZE bytes to TARGET_NAME through the bus, and
//                       its reply carrying them back
//     death COUNT       SIGKILL of a /bin/sleep holding the bus connection that owns
//                       DEATH_NAME, until a watcher connection sees NameOwnerChanged
//     activation COUNT  StartServiceByName(ACTIVATED_NAME), absent, until the bus answers
//                       that its service (portkit-dbus-service, from the bus's
//                       servicedir) owns it; then, not timed, Quit and its exit
//
// It ends at the end of its input. Built by scripts/bench-setup.sh.
#define _GNU_SOURCE
#include <dbus/dbus.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TARGET_NAME "org.portkit.Bench.Target"
#define DEATH_NAME "org.portkit.Bench.Death"
#define ACTIVATED_NAME "org.portkit.Bench.Activated"
#define OBJECT_PATH "/org/portkit/Bench"
#define INTERFACE "org.portkit.Bench"
#define TIMEOUT_MS 10000

extern char **environ;

static const char *bus_address;
static char failure[512];

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/// The median of `samples`, sorted in place (the mean of the middle two for an even count).
static double median(double *samples, int count) {
    qsort(samples, (size_t)count, sizeof(double), compare_doubles);
    return count % 2 ? samples[count / 2] : (samples[count / 2 - 1] + samples[count / 2]) / 2;
}

static int fail(const char *what, const DBusError *error) {
    snprintf(failure, sizeof failure, "%s%s%s", what, error && error->message ? ": " : "",
             error && error->message ? error->message : "");
    return -1;
}

/// A private connection to the bus, registered (Hello answered).
static DBusConnection *connect_bus(void) {
    DBusError error;
    dbus_error_init(&error);
    DBusConnection *connection = dbus_connection_open_private(bus_address, &error);
    if (connection == NULL || !dbus_bus_register(connection, &error)) {
        fail("connect to the bus", &error);
        dbus_error_free(&error);
        if (connection) {
            dbus_connection_close(connection);
            dbus_connection_unref(connection);
        }
        return NULL;
    }
    // The bus dropping us must not end the process.
    dbus_connection_set_exit_on_disconnect(connection, FALSE);
    return connection;
}

static int request_name(DBusConnection *connection, const char *name) {
    DBusError error;
    dbus_error_init(&error);
    int result = dbus_bus_request_name(connection, name, DBUS_NAME_FLAG_DO_NOT_QUEUE, &error);
    if (result != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) {
        fail("RequestName", &error);
        dbus_error_free(&error);
        return -1;
    }
    return 0;
}

// MARK: The owner

/// Answers Echo with the bytes of the call.
static DBusHandlerResult answer(DBusConnection *connection, DBusMessage *message, void *unused) {
    (void)unused;
    if (!dbus_message_is_method_call(message, INTERFACE, "Echo")) return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
    const unsigned char *bytes = NULL;
    int count = 0;
    DBusMessageIter iter, array;
    if (dbus_message_iter_init(message, &iter) && dbus_message_iter_get_arg_type(&iter) == DBUS_TYPE_ARRAY) {
        dbus_message_iter_recurse(&iter, &array);
        dbus_message_iter_get_fixed_array(&array, &bytes, &count);
    }
    DBusMessage *reply = dbus_message_new_method_return(message);
    dbus_message_append_args(reply, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, count, DBUS_TYPE_INVALID);
    dbus_connection_send(connection, reply, NULL);
    dbus_message_unref(reply);
    return DBUS_HANDLER_RESULT_HANDLED;
}

static void *serve(void *connection) {
    while (dbus_connection_read_write_dispatch(connection, -1)) {}
    return NULL;
}

/// Owns TARGET_NAME on a connection of its own, served by a thread.
static int start_owner(void) {
    DBusConnection *connection = connect_bus();
    if (connection == NULL || request_name(connection, TARGET_NAME) != 0) return -1;
    static const DBusObjectPathVTable table = {.message_function = answer};
    if (!dbus_connection_register_object_path(connection, OBJECT_PATH, &table, NULL)) return fail("register the object path", NULL);
    pthread_t thread;
    if (pthread_create(&thread, NULL, serve, connection) != 0) return fail("pthread_create", NULL);
    return 0;
}

// MARK: The cases

static int lookup(DBusConnection *client, double *samples, int count) {
    for (int i = 0; i < count; i++) {
        double start = now_us();
        DBusMessage *call = dbus_message_new_method_call(DBUS_SERVICE_DBUS, DBUS_PATH_DBUS, DBUS_INTERFACE_DBUS, "GetNameOwner");
        const char *name = TARGET_NAME;
        dbus_message_append_args(call, DBUS_TYPE_STRING, &name, DBUS_TYPE_INVALID);
        DBusError error;
        dbus_error_init(&error);
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(client, call, TIMEOUT_MS, &error);
        dbus_message_unref(call);
        const char *owner = NULL;
        if (reply == NULL || !dbus_message_get_args(reply, &error, DBUS_TYPE_STRING, &owner, DBUS_TYPE_INVALID) || owner[0] != ':') {
            fail("GetNameOwner", &error);
            dbus_error_free(&error);
            if (reply) dbus_message_unref(reply);
            return -1;
        }
        samples[i] = now_us() - start;
        dbus_message_unref(reply);
    }
    return 0;
}

static int call(DBusConnection *client, double *samples, int count, int size) {
    unsigned char *payload = malloc((size_t)size + 1);
    for (int i = 0; i < size; i++) payload[i] = (unsigned char)i;
    for (int i = 0; i < count; i++) {
        double start = now_us();
        DBusMessage *message = dbus_message_new_method_call(TARGET_NAME, OBJECT_PATH, INTERFACE, "Echo");
        const unsigned char *bytes = payload;
        dbus_message_append_args(message, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &bytes, size, DBUS_TYPE_INVALID);
        DBusError error;
        dbus_error_init(&error);
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(client, message, TIMEOUT_MS, &error);
        dbus_message_unref(message);
        const unsigned char *echoed = NULL;
        int echoedCount = -1;
        if (reply == NULL || !dbus_message_get_args(reply, &error, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &echoed, &echoedCount, DBUS_TYPE_INVALID)
            || echoedCount != size) {
            fail("Echo", &error);
            dbus_error_free(&error);
            if (reply) dbus_message_unref(reply);
            free(payload);
            return -1;
        }
        samples[i] = now_us() - start;
        dbus_message_unref(reply);
    }
    free(payload);
    return 0;
}

/// Waits on `watcher` for NameOwnerChanged of `name` to an owner (`appeared`) or to none.
static int await_owner_change(DBusConnection *watcher, const char *name, int appeared) {
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    while (1) {
        DBusMessage *message;
        while ((message = dbus_connection_pop_message(watcher)) != NULL) {
            const char *changed = NULL, *old = NULL, *new = NULL;
            int match = dbus_message_is_signal(message, DBUS_INTERFACE_DBUS, "NameOwnerChanged")
                && dbus_message_get_args(message, NULL, DBUS_TYPE_STRING, &changed, DBUS_TYPE_STRING, &old,
                                         DBUS_TYPE_STRING, &new, DBUS_TYPE_INVALID)
                && strcmp(changed, name) == 0 && (new[0] != 0) == appeared;
            dbus_message_unref(message);
            if (match) return 0;
        }
        double left = deadline - now_us();
        if (left <= 0) return fail(appeared ? "no NameOwnerChanged: the name never appeared" : "no NameOwnerChanged: the name never vanished", NULL);
        if (!dbus_connection_read_write(watcher, (int)(left / 1e3) + 1)) return fail("the watcher lost the bus", NULL);
    }
}

/// Whether `name` has an owner, asked on `connection`.
static int has_owner(DBusConnection *connection, const char *name) {
    DBusError error;
    dbus_error_init(&error);
    int owned = dbus_bus_name_has_owner(connection, name, &error);
    dbus_error_free(&error);
    return owned;
}

/// Starts /bin/sleep holding `socket` as its descriptor 3, as names.death's PortKit impl does.
static pid_t spawn_holder(int socket) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, socket, 3);
    char *argv[] = {"/bin/sleep", "600", NULL};
    pid_t pid = -1;
    int status = posix_spawn(&pid, "/bin/sleep", &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    return status == 0 ? pid : -1;
}

static int death_once(DBusConnection *watcher, double *sample) {
    DBusConnection *owner = connect_bus();
    if (owner == NULL || request_name(owner, DEATH_NAME) != 0 || await_owner_change(watcher, DEATH_NAME, 1) != 0) return -1;
    int socket = -1;
    if (!dbus_connection_get_socket(owner, &socket)) return fail("dbus_connection_get_socket", NULL);
    pid_t holder = spawn_holder(socket);
    if (holder < 0) return fail("posix_spawn /bin/sleep", NULL);
    // Closing our copy leaves the bus connection to the holder: libdbus only closes the
    // descriptor, so the bus sees nothing until the holder dies.
    dbus_connection_close(owner);
    dbus_connection_unref(owner);
    if (!has_owner(watcher, DEATH_NAME)) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        return fail("the name vanished before its holder was killed", NULL);
    }
    double start = now_us();
    kill(holder, SIGKILL);
    int status = await_owner_change(watcher, DEATH_NAME, 0);
    *sample = now_us() - start;
    waitpid(holder, NULL, 0);
    return status;
}

static int death(DBusConnection *watcher, double *samples, int count) {
    for (int i = 0; i < count; i++) {
        if (death_once(watcher, &samples[i]) != 0) return -1;
    }
    return 0;
}

/// StartServiceByName of the absent ACTIVATED_NAME, timed until the bus's answer (the
/// service owns the name); then the service is told to quit, and its name waited out.
static int activation(DBusConnection *client, double *samples, int count) {
    for (int i = 0; i < count; i++) {
        DBusError error;
        dbus_error_init(&error);
        dbus_uint32_t result = 0;
        double start = now_us();
        if (!dbus_bus_start_service_by_name(client, ACTIVATED_NAME, 0, &result, &error) || result != DBUS_START_REPLY_SUCCESS) {
            fail("StartServiceByName", &error);
            dbus_error_free(&error);
            return -1;
        }
        samples[i] = now_us() - start;
        DBusMessage *quit = dbus_message_new_method_call(ACTIVATED_NAME, OBJECT_PATH, INTERFACE, "Quit");
        dbus_message_set_auto_start(quit, FALSE);
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(client, quit, TIMEOUT_MS, NULL);
        dbus_message_unref(quit);
        if (reply) dbus_message_unref(reply);
        double deadline = now_us() + TIMEOUT_MS * 1e3;
        while (has_owner(client, ACTIVATED_NAME)) {
            if (now_us() > deadline) return fail("the activated service did not quit", NULL);
            usleep(100);
        }
    }
    return 0;
}

static int watch_deaths(DBusConnection *watcher) {
    DBusError error;
    dbus_error_init(&error);
    dbus_bus_add_match(watcher, "type='signal',sender='" DBUS_SERVICE_DBUS "',interface='" DBUS_INTERFACE_DBUS
                       "',member='NameOwnerChanged',arg0='" DEATH_NAME "'", &error);
    if (dbus_error_is_set(&error)) {
        fail("AddMatch", &error);
        dbus_error_free(&error);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: portkit-dbus-peer BUS_ADDRESS\n");
        return 2;
    }
    bus_address = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    dbus_threads_init_default();
    DBusConnection *client = NULL, *watcher = NULL;
    if (start_owner() != 0 || (client = connect_bus()) == NULL || (watcher = connect_bus()) == NULL || watch_deaths(watcher) != 0) {
        printf("fail %s\n", failure);
        return 1;
    }
    printf("ready\n");

    char line[128];
    while (fgets(line, sizeof line, stdin) != NULL) {
        char command[16];
        int count = 0, size = 0;
        int fields = sscanf(line, "%15s %d %d", command, &count, &size);
        if (fields < 2 || count <= 0 || count > 1000000) {
            printf("fail bad command: %s", line);
            continue;
        }
        double *samples = calloc((size_t)count, sizeof(double));
        int status;
        if (strcmp(command, "lookup") == 0) status = lookup(client, samples, count);
        else if (strcmp(command, "call") == 0 && fields == 3 && size >= 0) status = call(client, samples, count, size);
        else if (strcmp(command, "death") == 0) status = death(watcher, samples, count);
        else if (strcmp(command, "activation") == 0) status = activation(client, samples, count);
        else status = fail("unknown command", NULL);
        if (status == 0) printf("ok %.3f\n", median(samples, count));
        else printf("fail %s\n", failure);
        free(samples);
    }
    return 0;
}
