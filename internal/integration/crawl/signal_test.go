package crawl_test

import "os"

var interrupt = os.Interrupt
