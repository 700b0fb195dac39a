// libpq, the PostgreSQL client library (Debian: libpq-dev). Only LoopPostgres links it.
#include <libpq-fe.h>
