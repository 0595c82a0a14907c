/* tt_status: sentence and name lookup for the codes in TT_STATUS_MAP. */
#include "tt_status.h"

const char *tt_strerror(int status) {
    switch (status) {
#define TT_STATUS_MSG(name, val, msg)                                                              \
    case (val):                                                                                    \
        return (msg);
        TT_STATUS_MAP(TT_STATUS_MSG)
#undef TT_STATUS_MSG
    }
    return "unknown status";
}

const char *tt_status_name(int status) {
    switch (status) {
#define TT_STATUS_STR(name, val, msg)                                                              \
    case (val):                                                                                    \
        return #name;
        TT_STATUS_MAP(TT_STATUS_STR)
#undef TT_STATUS_STR
    }
    return "UNKNOWN";
}
