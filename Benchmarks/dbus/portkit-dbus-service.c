// portkit-dbus-service: the D-Bus side of portkit-bench's names.activation, the service the
// private bus starts on demand from its .service file (a C program with libdbus, as small
// as a D-Bus service gets). Started by the bus, it connects to the bus that started it
// (DBUS_STARTER_ADDRESS), owns ACTIVATED_NAME, and exits when called with Quit. With
// PORTKIT_READY_FD=N it only writes one byte to descriptor N and exits: the floor, a spawn
// until the program runs. Built by scripts/bench-setup.sh.
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ACTIVATED_NAME "org.portkit.Bench.Activated"
#define OBJECT_PATH "/org/portkit/Bench"
#define INTERFACE "org.portkit.Bench"

static DBusHandlerResult answer(DBusConnection *connection, DBusMessage *message, void *unused) {
    (void)unused;
    if (!dbus_message_is_method_call(message, INTERFACE, "Quit")) return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
    DBusMessage *reply = dbus_message_new_method_return(message);
    dbus_connection_send(connection, reply, NULL);
    dbus_connection_flush(connection);
    exit(0);
}

int main(void) {
    const char *ready = getenv("PORTKIT_READY_FD");
    if (ready != NULL) {
        char byte = 1;
        return write(atoi(ready), &byte, 1) == 1 ? 0 : 1;
    }
    DBusError error;
    dbus_error_init(&error);
    DBusConnection *connection = dbus_bus_get_private(DBUS_BUS_STARTER, &error);
    if (connection == NULL) {
        fprintf(stderr, "portkit-dbus-service: %s\n", error.message ? error.message : "no bus");
        return 1;
    }
    if (dbus_bus_request_name(connection, ACTIVATED_NAME, DBUS_NAME_FLAG_DO_NOT_QUEUE, &error) != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) {
        fprintf(stderr, "portkit-dbus-service: RequestName: %s\n", error.message ? error.message : "not the owner");
        return 1;
    }
    static const DBusObjectPathVTable table = {.message_function = answer};
    dbus_connection_register_object_path(connection, OBJECT_PATH, &table, NULL);
    while (dbus_connection_read_write_dispatch(connection, -1)) {}
    return 0;
}
