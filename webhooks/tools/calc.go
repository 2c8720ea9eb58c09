package tools

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Calculator limits.
const (
	maxExprLen   = 1000
	maxExprDepth = 64
)

// Calculate evaluates an arithmetic expression: decimal numbers, + - * / %,
// parentheses and unary minus (or plus), with the usual precedence.
// Division or remainder by zero, a non-finite result and anything else are
// errors that say what is wrong.
func Calculate(expr string) (float64, error) {
	if len(expr) > maxExprLen {
		return 0, fmt.Errorf("expression is longer than %d characters", maxExprLen)
	}
	p := &calc{s: expr}
	v, err := p.expr(0)
	if err != nil {
		return 0, err
	}
	p.skip()
	if p.i < len(p.s) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.s[p.i], p.i+1)
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, errors.New("the result is not a finite number")
	}
	return v, nil
}

type calc struct {
	s string
	i int
}

func (p *calc) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (p *calc) peek() byte {
	p.skip()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// expr := term (('+'|'-') term)*
func (p *calc) expr(depth int) (float64, error) {
	v, err := p.term(depth)
	for err == nil {
		op := p.peek()
		if op != '+' && op != '-' {
			break
		}
		p.i++
		var r float64
		if r, err = p.term(depth); err == nil {
			if op == '+' {
				v += r
			} else {
				v -= r
			}
		}
	}
	return v, err
}

// term := unary (('*'|'/'|'%') unary)*
func (p *calc) term(depth int) (float64, error) {
	v, err := p.unary(depth)
	for err == nil {
		op := p.peek()
		if op != '*' && op != '/' && op != '%' {
			break
		}
		p.i++
		var r float64
		if r, err = p.unary(depth); err != nil {
			break
		}
		switch {
		case op == '*':
			v *= r
		case r == 0:
			return 0, errors.New("division by zero")
		case op == '/':
			v /= r
		default:
			v = math.Mod(v, r)
		}
	}
	return v, err
}

// unary := ('-'|'+') unary | primary ; primary := number | '(' expr ')'
func (p *calc) unary(depth int) (float64, error) {
	if depth > maxExprDepth {
		return 0, fmt.Errorf("expression is nested more than %d levels deep", maxExprDepth)
	}
	switch c := p.peek(); {
	case c == '-' || c == '+':
		p.i++
		v, err := p.unary(depth + 1)
		if c == '-' {
			v = -v
		}
		return v, err
	case c == '(':
		p.i++
		v, err := p.expr(depth + 1)
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ) at position %d", p.i+1)
		}
		p.i++
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		start := p.i
		dot := false
		for p.i < len(p.s) && (p.s[p.i] >= '0' && p.s[p.i] <= '9' || p.s[p.i] == '.' && !dot) {
			dot = dot || p.s[p.i] == '.'
			p.i++
		}
		v, err := strconv.ParseFloat(p.s[start:p.i], 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %q at position %d", p.s[start:p.i], start+1)
		}
		return v, nil
	case c == 0:
		return 0, errors.New("unexpected end of expression")
	default:
		return 0, fmt.Errorf("unexpected %q at position %d (only numbers, + - * / %% and parentheses are allowed)", c, p.i+1)
	}
}

// numberResult returns v as an int64 when it is integral and exactly
// representable, so that 42 encodes as 42, not 42.0 or 4.2e+01.
func numberResult(v float64) any {
	if v == math.Trunc(v) && math.Abs(v) <= 1<<53 {
		return int64(v)
	}
	return v
}
