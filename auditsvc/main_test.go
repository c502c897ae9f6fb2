package auditsvc

import (
	"testing"

	"github.com/agtpsuite/agtp/services/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
