// EDL_API marks the symbols libedl exports; everything else is hidden (-fvisibility=hidden).
#pragma once

#if defined(EDL_BUILDING_LIBRARY)
#define EDL_API __attribute__((visibility("default")))
#else
#define EDL_API
#endif
